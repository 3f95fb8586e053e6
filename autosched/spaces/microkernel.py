"""First candidates for a matmul or convolution on a CPU: the register-tile shapes a hand-written GEMM kernel uses.

A multi-level-tiled block (``SSRSRS``: spatial tiles at four levels, reduction tiles at two) is searched from
random tilings, and on a large matmul the search settles in whichever region its first good samples fell in:
ViT-B/16's FFN matmul (200x768 @ 768x3072, GELU epilogue, 2 threads) ended at 2.4 ms in one 10-minute model run and
at 3.0-3.3 ms in three others (the same task and space). The seeds are points of the same space, measured first, so
the search goes on from them as from any measured setting. Each has the shape of a BLAS micro-kernel: ``r`` output
rows times ``c`` vectors of output columns accumulated in registers (16-28 of AVX-512's 32), a panel of 192 columns
per parallel chunk so the rows read stay in L1 while the weight panel streams from L2, the chunks ordered so that
neighbours share that panel (rows at tile level 1, columns at level 0), three reduction steps unrolled inside.
On that matmul alone: 2.54, 2.73 and 2.84 ms for (12, 2), (6, 4) and (8, 2), against 2.98 ms for the best of the
search's 178 trials in a run without them. ViT-B/16 tuned 10 minutes at 2 threads with them: 0.99x ONNX Runtime,
0.79x and 0.88x two models tuned without them (one process each, paired; README, "Micro-kernel seeds").

Only float32 blocks with one tiled block per function get seeds (low-precision kernels have their own designs).
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import arg_specs
from autosched.spaces.knobs import TiledSpace, with_tiles
from autosched.spaces.tiling import divisors

REGISTER_TILES = ((12, 2), (6, 4), (8, 2), (14, 2))  # (rows, vectors of columns): 24, 24, 16, 28 accumulators
# AVX2 and SSE have 16 vector registers, not AVX-512's 32: 12 accumulators at most (BLIS's Haswell kernel is 6 x 2)
REGISTER_TILES_16 = ((6, 2), (4, 3), (3, 4), (8, 1))
PANEL_COLUMNS = 192  # output columns of one parallel chunk (12 float32 vectors on AVX-512)
REDUCTION_STEP = 3  # reduction iterations unrolled inside the register tile
UNROLL = 512  # the deepest explicit unroll of parallel_vectorize_unroll
# A task's default schedule (``TraceSearchSpace.default_schedule``) unrolls less: as fast on ResNet-50's 3x3
# convolutions (150 vs 80-118 GFLOPS, 2 threads, AVX-512) and 2-15x cheaper to build (0.15 s instead of 0.8-2.3 s),
# which a model's compile pays once per group
DEFAULT_UNROLL = 64


def register_tiles(vector_bits: int) -> tuple[tuple[int, int], ...]:
    """The (rows, vectors of columns) tiles for a CPU whose widest vectors have ``vector_bits``."""
    return REGISTER_TILES if vector_bits >= 512 else REGISTER_TILES_16


def _below(extent: int, want: int) -> int:
    """The largest divisor of ``extent`` no larger than ``want`` (at least 1)."""
    return max(d for d in divisors(extent) if d <= max(want, 1))


def vector_width(n_cols: int, want: int, lanes: int) -> int:
    """The columns of a register tile: the largest divisor of ``n_cols`` up to ``want`` that is a whole number of
    vectors, else of half vectors, down to 4 lanes; else the largest divisor (58 = 2 x 29: 29). The largest divisor
    alone can be a ragged vector: 28 of 112 output channels is 16 + 12 lanes, and EfficientNet-B0's 1x1 convolution
    to 112 channels ran 4.6 GFLOPS in such a tile (1 thread), 65 in one of 16."""
    step = lanes
    while step >= 4:
        fits = [d for d in divisors(n_cols) if d <= want and d % step == 0]
        if fits:
            return max(fits)
        step //= 2
    return _below(n_cols, want)


def microkernel_params(space: TiledSpace, vector_bits: int, n: int = len(REGISTER_TILES),
                       unroll: int = UNROLL) -> list[dict[str, Any]]:
    """Up to ``n`` settings of the space's first multi-level-tiled design (spatial tilings at four levels, reduction
    tilings at two), one per register tile of ``register_tiles(vector_bits)``: the last spatial axis is the vector
    axis, the last other spatial axis of at least 4 holds the rows. [] where the function is not all float32 or has
    no such design. ``unroll``: the explicit unroll depth, where the design offers it."""
    if not _all_float32(space):
        return []
    lanes = max(vector_bits // 32, 1)
    for design in range(len(space.designs)):
        tiles = space.tile_knobs(design)
        levels = [knobs[0].n_levels for knobs in tiles.values()]
        if levels.count(4) < 2 or any(lv not in (2, 4) for lv in levels):
            continue
        spatial = [inst for inst, knobs in tiles.items() if knobs[0].n_levels == 4]
        reduction = [inst for inst, knobs in tiles.items() if knobs[0].n_levels == 2]
        rows = [inst for inst in spatial[:-1] if tiles[inst][0].extent >= 4]
        if not rows:
            return []
        vector, row = spatial[-1], rows[-1]
        n_cols, n_rows = tiles[vector][0].extent, tiles[row][0].extent
        base = {inst: [1, 1, 1] for inst in spatial}  # factors of levels 1..3; level 0 takes the rest
        for i, inst in enumerate(reduction):  # level 1: REDUCTION_STEP on the innermost reduction, 1 on the others
            base[inst] = [_below(tiles[inst][0].extent, REDUCTION_STEP) if i == len(reduction) - 1 else 1]
        out: list[dict[str, Any]] = []
        for r, c in register_tiles(vector_bits)[:n]:
            width, row_tile = vector_width(n_cols, c * lanes, lanes), _below(n_rows, r)
            factors = {**base, vector: [_below(n_cols // width, PANEL_COLUMNS // width), 1, width],
                       row: [n_rows // row_tile, row_tile, 1]}  # rows at level 1: column panels outermost
            params = with_tiles(space.default_params(design), tiles, factors)
            for knob in space.categorical_knobs(design):
                if unroll in knob.choices:
                    params[knob.name] = knob.choices.index(unroll)
            if params not in out:
                out.append(params)
        return out
    return []


def _all_float32(space: TiledSpace) -> bool:
    """Every buffer of the (single) function is float32."""
    funcs = list(space.mod.functions.values())
    return len(funcs) == 1 and all(dtype == "float32" for _, dtype in arg_specs(funcs[0]))
