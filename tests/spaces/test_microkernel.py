from __future__ import annotations

import re

import pytest

from autosched._tvm import llvm_vector_bits
from autosched.spaces.microkernel import REGISTER_TILES, microkernel_params, register_tiles
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import make_target
from autosched.tasks import op_task


def _space(op: str, shape: tuple[int, ...], target) -> TraceSearchSpace:
    return TraceSearchSpace(op_task(op, shape, target, settings_for(target).version).mod, target, settings_for(target))


def _innermost_vector_extent(script: str) -> set[int]:
    """Extents of the vectorised loops of a scheduled function's script."""
    return {int(a or b) for a, b in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)|T\.vectorized\((\d+)\)", script)}


@pytest.mark.parametrize("bits,widths", [(512, {32, 64}), (256, {8, 16, 32})])
def test_matmul_seeds_are_legal_and_hold_the_register_tiles(bits, widths, cpu_target):
    """16 lanes x (2, 4) vectors with AVX-512's 32 registers; 8 lanes x (1, 2, 3 -> 2, 4) with AVX2's 16 (256
    columns: no 24)."""
    space = _space("dense", (120, 256, 384), cpu_target)
    seeds = microkernel_params(space, bits)
    assert 1 <= len(seeds) <= len(REGISTER_TILES)
    assert len({tuple(sorted(p.items())) for p in seeds}) == len(seeds)  # no setting twice
    found: set[int] = set()
    for params in seeds:
        script = space.apply(params).mod.script()  # legal: the postprocessors accept it
        found |= _innermost_vector_extent(script) & {8, 16, 24, 32, 64}
        (unroll,) = [k for k in space.categorical_knobs(params["design"]) if 512 in k.choices]
        assert unroll.choices[params[unroll.name]] == 512
    assert found == widths  # c vectors of bits/32 float32 lanes
    assert all(r * c <= (28 if bits == 512 else 12) for r, c in register_tiles(bits))  # accumulators fit


def test_conv_seeds_vectorise_the_output_s_last_axis(cpu_target):
    space = _space("conv2d", (1, 64, 14, 14, 128, 3, 3), cpu_target)  # NCHW: the last axis is W (14)
    seeds = microkernel_params(space, 512, n=2)
    assert len(seeds) == 2
    for params in seeds:
        vectors = _innermost_vector_extent(space.apply(params).mod.script())
        assert vectors in ({14}, {28}, {14, 28})  # W, or two rows of it


def test_no_seeds_where_there_is_no_tiled_float32_block(cpu_target):
    assert microkernel_params(_space("softmax", (8, 64), cpu_target), 512) == []
    assert microkernel_params(_space("elementwise", (16, 64), cpu_target), 512) == []
    assert microkernel_params(_space("dense", (120, 256, 384), cpu_target), 512, n=0) == []


@pytest.mark.parametrize("cpu, bits", [("x86-64", 128), ("x86-64-v3", 256), ("znver3", 256), ("skylake-avx512", 512),
                                       ("znver5", 512), ("emeraldrapids", 512)])
def test_the_vector_width_is_the_target_cpu_s_own(cpu, bits):
    """From the target's instruction sets, not the machine's (TVM's own query answers 512 for every x86 CPU)."""
    assert llvm_vector_bits(make_target(f'{{"kind": "llvm", "mcpu": "{cpu}"}}')) == bits
    assert llvm_vector_bits(make_target("aarch64")) == 128


@pytest.mark.parametrize("n_cols,want,lanes,width", [(112, 32, 16, 16), (144, 32, 16, 16), (256, 32, 16, 32),
                                                      (40, 32, 16, 8), (58, 32, 16, 29), (112, 16, 8, 16),
                                                      (96, 64, 16, 48)])
def test_a_register_tile_s_columns_are_whole_vectors_where_a_divisor_allows(n_cols, want, lanes, width):
    """112 output channels: 16 (one vector), not 28 (16 + 12 lanes); 58 = 2 x 29 has no whole vector: 29."""
    from autosched.spaces.microkernel import vector_width

    assert vector_width(n_cols, want, lanes) == width
