"""One more CPU design, for a concatenation and the elementwise work fused after it: the loop along the
concatenated axis is partitioned at the inputs' boundaries, so each part reads one input, with no per-element
choice between inputs, and is vectorised.

TVM lowers ``concat`` to one block whose value is a chain of ``if_then_else(offset_k <= c, x_k[.., c - offset_k],
...)``, one level per input; MetaSchedule's rules inline it into the elementwise block after it and vectorise that
block's loops as they are, so every element still walks the chain. DenseNet-121 concatenates up to 32 inputs
before each layer's batch norm and ReLU: those 58 fused groups took 6.1 ms of the model's 38 ms on Zen 5 (2
threads), 5-14 GFLOPS. Partitioned, 2.5-7.6x faster (a 28x28x480 concat of 12 inputs: 516 -> 68 us).
The design is appended after the rules' designs, so the designs of every stored record keep their index.
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import Call, IRModule, Schedule, ScheduleError, Target, Trace, tirx, tvm

MAX_VECTOR = 256  # a partitioned part longer than this (and not at offset 0, which could be split) stays scalar
LANES = 16  # where a part is split for its vector: AVX-512's float32 width


def partitioned_concat_design(mod: IRModule, target: Target) -> Trace | None:
    """A design with every block inlined into the function's one output block and that block's concatenated axis
    partitioned, each part vectorised; None if the function is not a concatenation (with elementwise work around
    it) or a primitive refuses."""
    sch = Schedule(mod, error_render_level="none")
    threads = int(target.attrs.get("num-cores", 1))
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        for block in blocks[:-1]:
            sch.compute_inline(block)
        found = concat_axis(sch, blocks[-1])
        if found is None:
            return None
        axis, offsets = found
        loops = sch.get_loops(blocks[-1])
        sizes = [b - a for a, b in zip([0, *offsets], offsets, strict=False)]  # every part but the last
        outer = sch.fuse(*loops[:axis]) if axis > 1 else (loops[0] if axis == 1 else None)
        parts = sch.loop_partition(loops[axis], sizes)
        for part, start in zip(parts, [0, *offsets], strict=True):
            _vectorise(sch, part, start, innermost=axis == len(loops) - 1)
        if threads > 1 and outer is not None:
            sch.parallel(outer)
    except (ScheduleError, RuntimeError, tvm.error.InternalError):
        return None
    return sch.trace


def _vectorise(sch: Schedule, part: Any, start: int, innermost: bool) -> None:
    """The part's innermost loop vectorised: whole where short, else split (only a loop from 0 can be)."""
    loop = part if innermost else sch.get_loops(sch.get_child_blocks(part)[0])[-1]
    extent = int(sch.get(loop).extent)
    from_zero = not innermost or start == 0
    if extent <= MAX_VECTOR:
        sch.vectorize(loop)
    elif from_zero and extent % LANES == 0:
        sch.vectorize(sch.split(loop, [None, LANES])[1])


def concat_axis(sch: Schedule, block: Any) -> tuple[int, list[int]] | None:
    """(the loop index of the concatenated axis, the inputs' offsets along it after the first) for a spatial block
    in canonical form (one loop per iteration variable, in order) whose value chooses between inputs only by
    ``offset <= var`` conditions on one of its variables; else None."""
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    extents = [int(sch.get(loop).extent) for loop in loops]
    if (extents != [int(iv.dom.extent) for iv in stmt.iter_vars] or any(int(iv.iter_type) != 0 for iv in stmt.iter_vars)
            or not hasattr(stmt.body, "value")):
        return None
    conditions = _choices(stmt.body.value)
    if not conditions:
        return None
    for axis, iv in enumerate(stmt.iter_vars):
        offsets = sorted({int(c.a.value) for c in conditions if c.b.same_as(iv.var)})
        on_axis = sum(c.b.same_as(iv.var) for c in conditions)
        if offsets and on_axis == len(conditions) and 0 < offsets[0] and offsets[-1] < extents[axis]:
            return axis, offsets
    return None


def _choices(expr: Any) -> list[Any]:
    """The conditions of every ``if_then_else`` in ``expr`` if all are ``constant <= variable``, else []."""
    found: list[Any] = []
    other = False

    def walk(e: Any) -> None:
        nonlocal other
        if isinstance(e, Call) and e.op.name.endswith("if_then_else"):
            cond = e.args[0]
            bound = isinstance(cond, tirx.expr.LE) and isinstance(cond.a, tirx.expr.IntImm)
            if bound and isinstance(cond.b, tirx.expr.Var):
                found.append(cond)
            else:
                other = True
        for child in getattr(e, "args", ()):
            walk(child)
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(e, name, None)
            if isinstance(child, tvm.ir.expr.Expr):
                walk(child)

    walk(expr)
    return [] if other else found
