"""The designs a ``TraceSearchSpace`` appends after the rules' own, one entry each.

Stored records refer to a design by its index, so the entries are appended in this order, after the rules' designs
(no space version bump): a new design goes at the end of ``EXTRA_DESIGNS``. A function gets each entry whose
``SpaceSettings`` flag is on, on a target of its kind, where the entry's builder finds a design for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autosched._tvm import Trace
from autosched.spaces.attention import attention_design
from autosched.spaces.concat import partitioned_concat_design
from autosched.spaces.dlight_design import dlight_design
from autosched.spaces.injective import injective_design
from autosched.spaces.row_reduction import row_reduction_design
from autosched.spaces.serial import serial_design
from autosched.spaces.streaming import streaming_reduction_design


@dataclass(frozen=True)
class ExtraDesign:
    name: str  # what the space calls it (``design_index(name)``)
    flag: str  # the SpaceSettings switch that enables it
    # (mod, target) -> its trace, None where the function has no such design; (mod, target, source trace) for a copy
    build: Callable[..., Trace | None]
    target_kinds: tuple[str, ...] = ("llvm",)
    preferred: bool = True  # default_schedule tries it before the rules' designs (the later entry first)
    streaming_lanes: bool = False  # default_params: vectors of STREAMING_LANES lanes, not the trace's own decisions
    layout_rewrite: bool = True  # False: RewriteLayout is left out of its (and its copy's) postprocessors
    before_rules: bool = False  # built first: where the function has it, the rules may fail (then it alone is kept)
    skips_microkernel: bool = False  # where the function has it, default_schedule skips the micro-kernel rule
    # a copy of the design default_schedule would try first so far (``build`` gets its trace); left out of that order
    # (``TraceSearchSpace.serial_default`` measures it beside the default)
    copies_preferred: bool = False
    # its shared memory is all dynamic: VerifyGPUCode checks it against the GPU's opt-in limit per block (e.g. 227 KB
    # on an H100), not the 48 KB of static shared memory (``targets.max_dynamic_shared_memory``)
    dynamic_shared_memory: bool = False


EXTRA_DESIGNS: tuple[ExtraDesign, ...] = (
    # a reduction along a kept axis, streamed in order (spaces/streaming.py)
    ExtraDesign("streaming", "stream_reductions", streaming_reduction_design, streaming_lanes=True),
    # a concatenation computed part by part (spaces/concat.py): the parts start past 0, which RewriteLayout cannot index
    ExtraDesign("concat", "partition_concats", partitioned_concat_design, layout_rewrite=False),
    # a norm or softmax, row by row (spaces/row_reduction.py)
    ExtraDesign("row", "row_reductions", row_reduction_design, streaming_lanes=True),
    # a fused attention, blockwise (spaces/attention.py): the rules fail on it (reverse_compute_at); its trace's own
    # decisions are the micro-kernel's tile shapes
    ExtraDesign("attention", "attention_blocks", attention_design, before_rules=True, skips_microkernel=True),
    # a small function's preferred design without its parallel loops (spaces/serial.py)
    ExtraDesign("serial", "serial_small", serial_design, preferred=False, copies_preferred=True),
    # on a GPU, the schedule of TVM's dlight rules, with no knobs (spaces/dlight_design.py)
    ExtraDesign("dlight", "dlight_designs", dlight_design, target_kinds=("cuda",), dynamic_shared_memory=True),
    # a reshape or transpose streamed along its contiguous axes (spaces/injective.py)
    ExtraDesign("injective", "stream_injective", injective_design),
)
