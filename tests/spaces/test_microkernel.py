from __future__ import annotations

import re

import pytest

from autosched._tvm import llvm_vector_bits
from autosched.spaces.microkernel import REGISTER_TILES, microkernel_params
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import make_target
from autosched.tasks import op_task


def _space(op: str, shape: tuple[int, ...], target) -> TraceSearchSpace:
    return TraceSearchSpace(op_task(op, shape, target, settings_for(target).version).mod, target, settings_for(target))


def _innermost_vector_extent(script: str) -> set[int]:
    """Extents of the vectorised loops of a scheduled function's script."""
    return {int(a or b) for a, b in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)|T\.vectorized\((\d+)\)", script)}


@pytest.mark.parametrize("bits,widths", [(512, {32, 64}), (256, {16, 32})])
def test_matmul_seeds_are_legal_and_hold_the_register_tiles(bits, widths, cpu_target):
    space = _space("dense", (120, 256, 384), cpu_target)
    seeds = microkernel_params(space, bits)
    assert 1 <= len(seeds) <= len(REGISTER_TILES)
    assert len({tuple(sorted(p.items())) for p in seeds}) == len(seeds)  # no setting twice
    found: set[int] = set()
    for params in seeds:
        script = space.apply(params).mod.script()  # legal: the postprocessors accept it
        found |= _innermost_vector_extent(script) & widths
        (unroll,) = [k for k in space.categorical_knobs(params["design"]) if 512 in k.choices]
        assert unroll.choices[params[unroll.name]] == 512
    assert found == widths  # c vectors of bits/32 float32 lanes: 2 and 4 vectors


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


def test_the_host_vector_width_is_read_from_llvm():
    assert llvm_vector_bits(make_target("llvm", 1)) in (128, 256, 512)
