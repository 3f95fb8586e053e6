"""One more CPU design, for reductions that read along an axis they keep: the reduction loops go outside that
axis, which is vectorised, so the input streams through memory in order.

A global mean over H and W of an NHWC tensor (the squeeze-excitation blocks of EfficientNet and MobileNetV3, the
pooling before a classifier) or a pooling window in NHWC reads ``x[n, h, w, c]`` with ``c`` kept and ``h, w``
reduced. TVM's lowering puts the reduction loops innermost, and MetaSchedule's rules keep them there (they reorder
only the loops they tile), so every element read is one channel row away from the last: EfficientNet-B0's mean
over 56x56x96 ran 243 us on Zen 5 (1 thread) untuned and no faster in any design; with ``c`` innermost and
vectorised, 16 us. The design is appended after the rules' designs, so the designs of every stored record keep
their index (no space version bump); the tuner measures it like any other design.
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import IRModule, Schedule, ScheduleError, Target, Trace

SPATIAL, REDUCE = 0, 2  # tirx.IterVar kinds
MIN_STREAMED = 8  # a kept axis shorter than this is not worth a vector


def streaming_reduction_design(mod: IRModule, target: Target) -> Trace | None:
    """A design with every such reduction block rescheduled (the other blocks left to TVM's lowering); None if
    the function has no such block or a primitive refuses."""
    sch = Schedule(mod, error_render_level="none")
    threads = int(target.attrs.get("num-cores", 1))
    changed = False
    try:
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            kept = _streamed_axis(sch, block)
            if kept is None:
                continue
            loops, n_spatial = sch.get_loops(block), _n_spatial(sch, block)
            spatial = [loop for i, loop in enumerate(loops[:n_spatial]) if i != kept]
            reduce = loops[n_spatial:]
            outer, inner = sch.split(loops[kept], sch.sample_perfect_tile(loops[kept], n=2, max_innermost_factor=64))
            sch.reorder(*spatial, outer, *reduce, inner)
            if threads > 1:
                sch.parallel(sch.fuse(*spatial, outer))
            sch.vectorize(inner)
            changed = True
    except (ScheduleError, RuntimeError):
        return None
    return sch.trace if changed else None


def _n_spatial(sch: Schedule, block: Any) -> int:
    return sum(iv.iter_type == SPATIAL for iv in sch.get(block).iter_vars)


def _streamed_axis(sch: Schedule, block: Any) -> int | None:
    """The index of the spatial loop of ``block`` that its one input is contiguous along, if the block is a
    reduction in canonical form (one loop per iteration variable, spatial ones first) whose innermost input index
    is a kept axis of at least MIN_STREAMED; else None."""
    stmt = sch.get(block)
    kinds = [int(iv.iter_type) for iv in stmt.iter_vars]
    loops = sch.get_loops(block)
    if (len(stmt.reads) != 1 or REDUCE not in kinds or set(kinds) != {SPATIAL, REDUCE}
            or kinds != sorted(kinds) or len(loops) != len(kinds)):
        return None
    extents = [int(sch.get(loop).extent) for loop in loops]
    if extents != [int(iv.dom.extent) for iv in stmt.iter_vars]:
        return None
    last = stmt.reads[0].region[-1]
    for i, iv in enumerate(stmt.iter_vars):
        if iv.iter_type == SPATIAL and last.min.same_as(iv.var) and int(last.extent) == 1:
            return i if extents[i] >= MIN_STREAMED else None
    return None
