"""One more CPU design, for norms and softmaxes: every block under one parallel loop over the rows, the
elementwise blocks vectorised along the row, the reductions split along it into unrolled vector-sized chunks.

A softmax (max, exp, sum, divide) or a layer / RMS norm (mean, variance, normalise) reduces each row along its
contiguous axis in several blocks. MetaSchedule's rules schedule each block on its own, with random compute
locations and rfactor splits: BERT's softmax over 128x128 scores ran 0.1 GFLOPS in the rules' first design, 7x
slower than TVM's unscheduled build. This is TVM's dlight CPU ``Reduction`` rule (s_tir/dlight/cpu/reduction.py)
written as a design of the space: its vector splits are sampled tilings (knobs), the widest vector of the CPU or
less by default. Appended after the rules' designs, which keep their index (a serial copy, appended last, moves
one up).
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import IRModule, Schedule, ScheduleError, Target, Trace


def row_reduction_design(mod: IRModule, target: Target) -> Trace | None:
    """The design for a function of reductions and elementwise blocks that share their leading spatial axes
    and end with an elementwise block; None for any other function or where a primitive refuses."""
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = Schedule(mod, error_render_level="none")
    try:
        blocks = normalize_prim_func(sch)
        if (blocks is None or len(blocks) < 2 or not blocks[-1].is_injective()
                or all(b.is_injective() for b in blocks)
                or any(not b.dom_kind().startswith("S") for b in blocks)):
            return None
        n_rows = min(len(b.dom_kind()) - len(b.dom_kind().lstrip("S")) for b in blocks)
        if len(blocks[-1].dom_kind()) <= n_rows:  # nothing along the row to vectorise
            return None
        last = blocks[-1].block_rv
        loops = sch.get_loops(last)
        rows = sch.fuse(*loops[:n_rows]) if n_rows > 1 else loops[0]
        if int(target.attrs.get("num-cores", 1)) > 1:
            sch.parallel(rows)
        _vectorize_inner(sch, last)
        for block in reversed(blocks[:-1]):
            sch.compute_at(block.block_rv, rows, preserve_unit_loops=True)
        for block in blocks[:-1]:
            if len(sch.get_loops(block.block_rv)) == 1:  # a scalar per row (a mean from its sum)
                continue
            if block.is_injective():
                _vectorize_inner(sch, block.block_rv)
            else:
                _unroll_inner(sch, block.block_rv)
    except (ScheduleError, RuntimeError, ValueError):
        return None
    return sch.trace


MAX_LANES = 64  # the widest vector split a knob may choose (elements)


def _vectorize_inner(sch: Schedule, block: Any) -> None:
    """Split the block's innermost loop by a sampled factor and vectorise the inner part."""
    inner = sch.get_loops(block)[-1]
    factors = sch.sample_perfect_tile(inner, n=2, max_innermost_factor=MAX_LANES)
    sch.vectorize(sch.split(inner, factors)[1])


def _unroll_inner(sch: Schedule, block: Any) -> None:
    """Split the reduction's innermost loop by a sampled factor and unroll the inner part explicitly."""
    inner = sch.get_loops(block)[-1]
    factors = sch.sample_perfect_tile(inner, n=2, max_innermost_factor=MAX_LANES)
    _, chunk = sch.split(inner, factors)
    sch.annotate(chunk, "pragma_auto_unroll_max_step", MAX_LANES)
    sch.annotate(chunk, "pragma_unroll_explicit", 1)
