"""One more CPU design, for the fused attention of ``graph/attention.py``: blockwise over query rows.

The fused PrimFunc computes softmax(Q Kᵀ · scale + mask) V in stages (``attn_scores``, ``attn_logits``,
``attn_max``, ``attn_exp``, ``attn_sum``, ``attn_acc``, ``attn_out``). This design splits the query rows into
blocks, one parallel iteration per (batch, head, block), and computes every stage of a block inside it, so a
block's scores (rows x keys floats) are written and read while they are in cache instead of going through memory
three times. The two matmuls inside are register-blocked (rows of the block by one vector of keys or of value
columns, the reduction between), the exponentials vectorised, the row reductions scalar. Its knobs are sampled
tilings: the rows per block, the register rows and the vector widths. Appended after the rules' designs, which keep
their index (a serial copy, appended last, moves one up).
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import IRModule, Schedule, ScheduleError, Target, Trace

STAGES = ("attn_scores", "attn_logits", "attn_max", "attn_exp", "attn_sum", "attn_acc", "attn_out")
MAX_ROWS, MAX_REGISTER_ROWS, MAX_LANES = 64, 8, 16


def attention_design(mod: IRModule, target: Target) -> Trace | None:
    """The blockwise design of a function made of the fused attention's stages; None for any other function or
    where a primitive refuses."""
    sch = Schedule(mod, error_render_level="none")
    try:
        blocks = {sch.get(b).name_hint: b for b in sch.get_child_blocks(sch.get_sblock("root"))}
        if set(blocks) != set(STAGES):
            return None
        sch.compute_inline(blocks["attn_logits"])
        *batch, rows, cols = sch.get_loops(blocks["attn_out"])
        outer, inner = sch.split(rows, sch.sample_perfect_tile(rows, n=2, max_innermost_factor=MAX_ROWS))
        block_loop = sch.fuse(*batch, outer) if batch else outer
        if int(target.attrs.get("num-cores", 1)) > 1:
            sch.parallel(block_loop)
        _vectorize(sch, cols)
        for name in ("attn_acc", "attn_sum", "attn_exp", "attn_max", "attn_scores"):
            sch.compute_at(blocks[name], block_loop, preserve_unit_loops=True)
        _register_blocked(sch, blocks["attn_scores"])  # rows x keys, over the head dimension
        _register_blocked(sch, blocks["attn_acc"])  # rows x value columns, over the keys
        _vectorize(sch, sch.get_loops(blocks["attn_exp"])[-1])
    except (ScheduleError, RuntimeError, ValueError):
        return None
    return sch.trace


def _vectorize(sch: Schedule, loop: Any) -> None:
    sch.vectorize(sch.split(loop, sch.sample_perfect_tile(loop, n=2, max_innermost_factor=MAX_LANES))[1])


def _register_blocked(sch: Schedule, block: Any) -> None:
    """A matmul stage under the block loop (rows, columns, reduction) as a register tile: register rows by one
    vector of columns accumulated across the reduction."""
    *_, rows, cols, red = sch.get_loops(block)
    row_outer, row_inner = sch.split(rows, sch.sample_perfect_tile(rows, n=2, max_innermost_factor=MAX_REGISTER_ROWS))
    col_outer, col_inner = sch.split(cols, sch.sample_perfect_tile(cols, n=2, max_innermost_factor=MAX_LANES))
    sch.reorder(row_outer, col_outer, red, row_inner, col_inner)
    sch.unroll(row_inner)
    sch.vectorize(col_inner)
