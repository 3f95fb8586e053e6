"""One more CPU design, for injective functions that do not read their inputs in the output's order (reshapes,
transposes and the work fused with them): every block inlined into the one output block, whose loops keep their
own order; the innermost
output axis is split and its inner part vectorised, the loops outside it fused and parallel. Where the largest
input is contiguous along another output axis (a transpose that moves its last axis), that axis and the
innermost one are tiled together, so each tile reads contiguous runs of the input and writes contiguous runs of
the output while both are in cache.

MetaSchedule's rules fuse every loop of such a block into one and vectorise a fixed-width piece of it: where the
innermost axis is not a multiple of that width the vector crosses rows, every lane's index is a division and a
remainder, and the loads are gathers: a Swin window partition (1x56x56x96 -> 64x49x96) ran 2.1 GB/s at 2
threads on Zen 5, 4.6x slower than TVM's unscheduled build; an NCHW -> NHWC transpose 1.6 GB/s, reading one
element of each input row per vector. Elementwise work and broadcasts, read in order, keep the rules' design
(their fused vectors are contiguous). Appended after the other designs, so stored records keep their design.
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import IRModule, Schedule, ScheduleError, Target, Trace, tirx, tvm
from autosched.spaces.concat import concat_axis

SPATIAL = 0  # tirx.IterVar kind
MIN_LANES = 4  # an innermost axis not a multiple of this is left to the rules (odd-width vectors are slow)
MIN_TILED = 8  # a transposed axis shorter than this is not tiled
MAX_TILE = 64  # the largest tile or vector a knob may choose (elements); the default vector of a plain stream
TILE_LANES = 16  # a transpose's default tile, both ways (16 x 16 float32: 16 cache lines each side)


def injective_design(mod: IRModule, target: Target) -> Trace | None:
    """The design for a function whose blocks are all spatial and inline into one output block that reads some
    input out of order, without a per-element choice (a concatenation has its own design); None for any other or
    where a primitive refuses."""
    sch = Schedule(mod, error_render_level="none")
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        if not blocks or any(not _spatial(sch, b) for b in blocks):
            return None
        for block in blocks[:-1]:
            sch.compute_inline(block)
        out = blocks[-1]
        extents = _canonical_extents(sch, out)
        if extents is None or extents[-1] % MIN_LANES or _chooses(sch, out) or _in_order(sch, out):
            return None
        _schedule_output(sch, out, extents, int(target.attrs.get("num-cores", 1)))
    except (ScheduleError, RuntimeError, tvm.error.InternalError):
        return None
    return sch.trace


def _schedule_output(sch: Schedule, block: Any, extents: list[int], threads: int) -> None:
    """Tile the transposed axis with the innermost one (if any), vectorise the innermost tile, parallel outside."""
    loops = sch.get_loops(block)
    source = _source_axis(sch, block)
    tiled = source is not None and source != len(loops) - 1 and extents[source] >= MIN_TILED
    inner_o, inner_i = _split(sch, loops[-1], TILE_LANES if tiled else MAX_TILE)
    if tiled:
        tile_o, tile_i = _split(sch, loops[source], TILE_LANES)
        others = [loop for i, loop in enumerate(loops[:-1]) if i != source]
        sch.reorder(*others, tile_o, inner_o, tile_i, inner_i)
        outer = [*others, tile_o, inner_o]
    else:
        outer = [*loops[:-1], inner_o]
    sch.vectorize(inner_i)
    if threads > 1:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])


def _split(sch: Schedule, loop: Any, default: int) -> list[Any]:
    """Split by a sampled tiling (a knob) whose own decision, the default, is the widest multiple of 4 up to
    ``default`` that divides the extent (or the widest divisor, where no multiple of 4 does)."""
    extent = int(sch.get(loop).extent)
    divisors = [d for d in range(1, min(extent, default) + 1) if extent % d == 0]
    inner = max((d for d in divisors if d % MIN_LANES == 0), default=divisors[-1])
    factors = sch.sample_perfect_tile(loop, n=2, max_innermost_factor=MAX_TILE, decision=[extent // inner, inner])
    return sch.split(loop, factors)


def _spatial(sch: Schedule, block: Any) -> bool:
    stmt = sch.get(block)
    return bool(stmt.iter_vars) and all(iv.iter_type == SPATIAL for iv in stmt.iter_vars)


def _canonical_extents(sch: Schedule, block: Any) -> list[int] | None:
    """The block's loop extents where it has one loop per iteration variable, over its domain; else None."""
    stmt, loops = sch.get(block), sch.get_loops(block)
    if len(loops) != len(stmt.iter_vars) or len(loops) < 1:
        return None
    extents = [int(sch.get(loop).extent) for loop in loops]
    return extents if extents == [int(iv.dom.extent) for iv in stmt.iter_vars] else None


def _chooses(sch: Schedule, block: Any) -> bool:
    """Whether the block is a concatenation (a choice between inputs per element: ``concat.py``'s design)."""
    return concat_axis(sch, block) is not None


def _in_order(sch: Schedule, block: Any) -> bool:
    """Whether every input is read element by element in the output's order (elementwise work and broadcasts:
    each index an iteration variable, in order, or a broadcast's 0): the rules' fused vectors stay contiguous."""
    stmt = sch.get(block)
    for read in stmt.reads:
        seen = []
        for r in read.region:
            if not isinstance(r.extent, tirx.IntImm) or int(r.extent) != 1:
                return False
            if isinstance(r.min, tirx.Var):
                seen.append(next((i for i, iv in enumerate(stmt.iter_vars) if iv.var.same_as(r.min)), -1))
            elif not (isinstance(r.min, tirx.IntImm) and int(r.min) == 0):
                return False
        if -1 in seen or seen != sorted(seen) or len(set(seen)) != len(seen):
            return False
    return True


def _source_axis(sch: Schedule, block: Any) -> int | None:
    """The output axis (loop index) along which the block's largest input is contiguous: the one iteration
    variable its last index depends on; None where it depends on none or several."""
    stmt = sch.get(block)
    reads = sorted(stmt.reads, key=lambda r: -_n_elements(r.source))  # TVM 0.27: source is the buffer
    if not reads:
        return None
    used = tirx.analysis.undefined_vars(reads[0].region[-1].min)
    hits = [i for i, iv in enumerate(stmt.iter_vars) if any(iv.var.same_as(v) for v in used)]
    return hits[0] if len(hits) == 1 else None


def _n_elements(buffer: Any) -> int:
    n = 1
    for dim in buffer.shape:
        n *= int(dim)
    return n

