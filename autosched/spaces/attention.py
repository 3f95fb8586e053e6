"""One more CPU design, for the fused attention of ``graph/attention.py``: blockwise over query rows, both products
register-blocked like the matmul micro-kernel (``spaces/microkernel.py``).

The fused PrimFunc computes softmax(Q Kᵀ · scale + mask) V in stages (``attn_scores``, ``attn_logits``,
``attn_max``, ``attn_exp``, ``attn_sum``, ``attn_acc``, ``attn_out``). This design splits the (batch, head) pairs
and the query rows into blocks, one parallel iteration per block, and computes every stage of a block inside it, so
a block's scores (rows x keys floats) are written and read while they are in L1/L2 instead of going through memory
three times; the softmax is exact, a whole key row at once (4096 keys are 16 KB a row). Several (batch, head) pairs
per iteration serve short rows over many windows (a Swin window: 49 queries x 49 keys).

Both products are register tiles: ``r`` query rows by a run of vector lanes along the keys (Q·Kᵀ, reduced over the
head dimension) or along the value columns (P·V, reduced over the keys), the reduction outside the tile, so the
accumulators stay in registers. The lanes are a divisor of the key count, a whole number of vectors where one
divides: 49 keys are one run of 49 lanes (three vectors and one lane, which LLVM splits into vector registers), 1500
keys runs of 60. The register rows are one sampled factor shared by both products (one split of the block's rows,
so every knob keeps its meaning whatever the others are). The trace's own decisions are the micro-kernel's tile
shapes (``default_decisions``), the default schedule of the task; its knobs are the tilings. Appended after the
rules' designs, which keep their index (a serial copy, appended last, moves one up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autosched._tvm import IRModule, Schedule, ScheduleError, Target, Trace, llvm_vector_bits
from autosched.spaces.microkernel import vector_width
from autosched.spaces.tiling import divisors

STAGES = ("attn_scores", "attn_logits", "attn_max", "attn_exp", "attn_sum", "attn_acc", "attn_out")
COPIES = ("attn_kpad", "attn_crop")  # where keys or query rows are padded (graph/attention.py)
MAX_PAIRS, MAX_REGISTER_ROWS, MAX_LANES = 64, 8, 64
ACCUMULATORS = 28  # vector registers a register tile may hold (of AVX-512's 32; 12 of 16 below it)
BLOCK_SCORES = 16384  # scores of a block (rows x keys floats, 64 KB; the exponentials as many): in L2 by default
MIN_BLOCKS = 8  # parallel iterations a default keeps at least, where the rows allow (a share for each thread)


@dataclass(frozen=True)
class Tiles:
    """A design's decisions: (batch, head) pairs per block, query rows per block and per register tile, and the
    vector lanes of the output, the scores' keys, the values' columns and the exponentials."""

    pairs: int
    block_rows: int
    register_rows: int
    out_lanes: int
    key_lanes: int
    value_lanes: int
    exp_lanes: int
    reduce_lanes: int


def attention_design(mod: IRModule, target: Target) -> Trace | None:
    """The blockwise design of a function made of the fused attention's stages; None for any other function or
    where a primitive refuses."""
    sch = Schedule(mod, error_render_level="none")
    try:
        blocks = {sch.get(b).name_hint: b for b in sch.get_child_blocks(sch.get_sblock("root"))}
        if set(blocks) - set(COPIES) != set(STAGES):
            return None
        tiles = default_decisions(_extents(sch, blocks), llvm_vector_bits(target))
        sch.compute_inline(blocks["attn_logits"])
        for name in COPIES:
            if name in blocks:
                _copy(sch, blocks[name], _n_cores(target) > 1, llvm_vector_bits(target) // 32)
        partial = {name: _split_reduction(sch, blocks[name], tiles.reduce_lanes) for name in ("attn_max", "attn_sum")}
        block_loop, register_rows = _blocks(sch, blocks["attn_out"], tiles)
        if _n_cores(target) > 1:
            sch.parallel(block_loop)
        for block in (blocks["attn_acc"], blocks["attn_sum"], partial["attn_sum"], blocks["attn_exp"],
                      blocks["attn_max"], partial["attn_max"], blocks["attn_scores"]):
            sch.compute_at(block, block_loop, preserve_unit_loops=True)
        _register_blocked(sch, blocks["attn_scores"], register_rows, tiles.key_lanes)  # rows x keys, over d
        _register_blocked(sch, blocks["attn_acc"], register_rows, tiles.value_lanes)  # rows x values, over keys
        _vectorize(sch, sch.get_loops(blocks["attn_exp"])[-1], tiles.exp_lanes)
        for block in partial.values():
            _rows_inner(sch, block, register_rows)
    except (ScheduleError, RuntimeError, ValueError):
        return None
    return sch.trace


def _copy(sch: Schedule, block: Any, parallel: bool, lanes: int) -> None:
    """A copy around the blocks (Kᵀ padded, the output's real rows cropped): parallel over its rows, vectorised
    along them."""
    *rows, cols = sch.get_loops(block)
    fused = sch.fuse(*rows)
    if parallel:
        sch.parallel(fused)
    sch.vectorize(sch.split(cols, [None, vector_width(_extent(sch, cols), lanes, lanes)])[1])


def _n_cores(target: Target) -> int:
    return int(target.attrs.get("num-cores", 1))


def _extents(sch: Schedule, blocks: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(batch and head pairs, query rows, keys, head dimension, value columns) of the stages' loops."""
    *batch, n_q, n_k, depth = (int(sch.get(loop).extent) for loop in sch.get_loops(blocks["attn_scores"]))
    n_pairs = 1
    for extent in batch:
        n_pairs *= extent
    return n_pairs, n_q, n_k, depth, int(sch.get(sch.get_loops(blocks["attn_out"])[-1]).extent)


def _blocks(sch: Schedule, out: Any, tiles: Tiles) -> tuple[Any, Any]:
    """The output's loops split into blocks of (batch, head) pairs (of the innermost leading dimension: a block of
    a fused pair loop would cross its rows of the outer dimension) and of query rows, fused into one loop, the
    output columns vectorised. Returns (the block loop, the sampled register rows)."""
    *batch, rows, cols = sch.get_loops(out)
    if not batch:
        batch = [sch.add_unit_loop(rows)]
    pairs = batch[-1]
    pair_factors = sch.sample_perfect_tile(pairs, n=2, max_innermost_factor=MAX_PAIRS, decision=[
        _extent(sch, pairs) // tiles.pairs, tiles.pairs])
    pair_outer, pair_inner = sch.split(pairs, pair_factors)
    n_q = _extent(sch, rows)
    row_factors = sch.sample_perfect_tile(rows, n=3, max_innermost_factor=MAX_REGISTER_ROWS, decision=[
        n_q // tiles.block_rows, tiles.block_rows // tiles.register_rows, tiles.register_rows])
    row_outer, row_mid, row_inner = sch.split(rows, row_factors)
    sch.reorder(pair_outer, row_outer, pair_inner, row_mid, row_inner)
    _vectorize(sch, cols, tiles.out_lanes)
    return sch.fuse(*batch[:-1], pair_outer, row_outer), row_factors[2]


def _extent(sch: Schedule, loop: Any) -> int:
    return int(sch.get(loop).extent)


def _vectorize(sch: Schedule, loop: Any, lanes: int) -> None:
    factors = sch.sample_perfect_tile(loop, n=2, max_innermost_factor=MAX_LANES,
                                      decision=[_extent(sch, loop) // lanes, lanes])
    sch.vectorize(sch.split(loop, factors)[1])


def _register_blocked(sch: Schedule, block: Any, register_rows: Any, lanes: int) -> None:
    """A matmul stage under the block loop (pairs, rows, columns, reduction) as a register tile: the sampled
    register rows by a sampled run of vector lanes of columns, accumulated across the reduction."""
    *_, rows, cols, red = sch.get_loops(block)
    row_outer, row_inner = sch.split(rows, [None, register_rows])
    factors = sch.sample_perfect_tile(cols, n=2, max_innermost_factor=MAX_LANES,
                                      decision=[_extent(sch, cols) // lanes, lanes])
    col_outer, col_inner = sch.split(cols, factors)
    sch.reorder(row_outer, col_outer, red, row_inner, col_inner)
    sch.unroll(row_inner)
    sch.vectorize(col_inner)
    # accumulated in a local tile, written back once: the stage's buffer is a workspace LLVM cannot prove unaliased,
    # so accumulating in it would load and store every accumulator at every step of the reduction
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, col_outer, preserve_unit_loops=True)
    *_, rows_back, cols_back = sch.get_loops(write_back)
    sch.unroll(rows_back)
    sch.vectorize(cols_back)


def _split_reduction(sch: Schedule, block: Any, lanes: int) -> Any:
    """A row reduction (max, sum) as a partial one into a vector of sampled lanes (rfactor) and a short final one
    over the lanes; returns the partial block."""
    *spatial, key = sch.get_loops(block)
    factors = sch.sample_perfect_tile(key, n=2, max_innermost_factor=MAX_LANES,
                                      decision=[_extent(sch, key) // lanes, lanes])
    return sch.rfactor(sch.split(key, factors)[1], factor_axis=len(spatial))


def _rows_inner(sch: Schedule, partial: Any, register_rows: Any) -> None:
    """A partial row reduction under the block loop (lanes, leading dims, rows, keys: rfactor's order) as the register
    rows by the lanes inside the keys: as many independent chains of vector maxima (or adds) as rows, not one chain of
    a row's length."""
    _, lanes, *_, rows, keys = sch.get_loops(partial)  # under the block loop: lanes, each leading dim, rows, keys
    row_outer, row_inner = sch.split(rows, [None, register_rows])
    sch.reorder(row_outer, keys, row_inner, lanes)
    sch.unroll(row_inner)
    sch.vectorize(lanes)


def default_decisions(extents: tuple[int, int, int, int, int], vector_bits: int) -> Tiles:
    """The micro-kernel's shapes for an attention of these (pairs, query rows, padded keys, head dimension, value
    columns): runs of up to four vectors along the keys and the value columns, as many register rows as the
    accumulators allow, and blocks of rows whose scores fit ``BLOCK_SCORES``, at least ``MIN_BLOCKS`` of them
    where the rows allow; one (batch, head) pair per block."""
    n_pairs, n_q, n_k, _, n_v = extents
    lanes = max(vector_bits // 32, 1)
    key_lanes, value_lanes = vector_width(n_k, 4 * lanes, lanes), vector_width(n_v, 4 * lanes, lanes)
    n_vectors = max(-(-key_lanes // lanes), -(-value_lanes // lanes))
    budget = ACCUMULATORS if vector_bits >= 512 else 12
    register_rows = _below(n_q, min(MAX_REGISTER_ROWS, max(budget // n_vectors, 1)))
    want = max(BLOCK_SCORES // n_k, register_rows)
    if n_pairs * (n_q // want) < MIN_BLOCKS:
        want = max(-(-n_q * n_pairs // MIN_BLOCKS), register_rows)
    block_rows = max(d for d in divisors(n_q) if d % register_rows == 0 and (d <= want or d == register_rows))
    # a partial reduction of a short row into 16 lanes leaves a final one as long as itself: 4 lanes below 256 keys
    # (16 keys, 384 pairs, 2 threads: 0.81 ms in 4 lanes, 1.5 ms in 16)
    reduce_lanes = vector_width(n_k, lanes if n_k >= lanes * lanes else 4, lanes)
    return Tiles(1, block_rows, register_rows, vector_width(n_v, lanes, lanes), key_lanes, value_lanes,
                 vector_width(n_k, 4 * lanes, lanes), reduce_lanes)


def _below(extent: int, want: int) -> int:
    """The largest divisor of ``extent`` no larger than ``want``."""
    return max(d for d in divisors(extent) if d <= max(want, 1))
