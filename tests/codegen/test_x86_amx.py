"""The AMX matmul kernels (bf16, int8): they generate AMX tile instructions for a CPU that has them (code generation
only: runs on any x86 host), pack weights as the tiles read them, and, on a CPU with AMX, compute the matmul."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from autosched._tvm import IRModule, cpu_device, tvm
from autosched.codegen.x86_amx import BF16, INT8, amx_matmul, compile_kernel, fits, has_amx, pack_weight
from autosched.targets import make_target

SAPPHIRE_RAPIDS = make_target('{"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 1}')
SKYLAKE = make_target('{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}')
HOST = make_target("llvm", 2)


def _amx_here(kind):
    return pytest.mark.skipif(not has_amx(HOST, kind), reason=f"this CPU has no AMX {kind.name} (or Linux refuses it)")


@pytest.mark.parametrize("kind", [BF16, INT8], ids=["bf16", "int8"])
def test_the_kernel_generates_amx_tile_instructions(kind):
    mod = IRModule({"main": amx_matmul(64, 64, 128, kind).with_attr("global_symbol", "main")})
    asm = tvm.compile(mod, target=SAPPHIRE_RAPIDS).mod.inspect_source("asm")
    assert asm.count(kind.instruction) >= 4  # the 2 x 2 tiles of one 32 x 32 block
    assert "ldtilecfg" in asm and "tileloadd" in asm and "tilestored" in asm


def test_only_targets_with_amx_qualify():
    assert has_amx(SAPPHIRE_RAPIDS, BF16) and has_amx(SAPPHIRE_RAPIDS, INT8)  # not this CPU: the target decides
    assert not has_amx(SKYLAKE, BF16) and not has_amx(SKYLAKE, INT8)
    assert not has_amx(make_target("cuda"))


def test_n_and_k_must_be_multiples_of_a_block_and_a_step():
    assert fits(64, 96) and not fits(48, 96) and not fits(64, 80)
    assert fits(64, 128, INT8) and not fits(64, 96, INT8)  # 64 int8 values per 64-byte tile row
    with pytest.raises(ValueError, match="multiple of 32"):
        amx_matmul(32, 48, 64)


@pytest.mark.parametrize("kind", [BF16, INT8], ids=["bf16", "int8"])
def test_weights_are_packed_as_amx_reads_them(kind):
    k, n = 128, 96
    w = np.arange(k * n, dtype=np.float32).reshape(k, n)
    packed = pack_weight(w, kind)
    assert packed.shape == (n // 32, k // kind.pack, 32, kind.pack)
    kk, jj = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    np.testing.assert_array_equal(packed[jj // 32, kk // kind.pack, jj % 32, kk % kind.pack], w)


SHAPES = [(32, 32, 64), (64, 96, 128), (128, 64, 768), (1, 64, 64), (13, 32, 192), (16, 64, 64), (45, 64, 64),
          (60, 64, 64), (197, 96, 64)]  # whole 32-row blocks, and last rows (up to 16, and more)


@_amx_here(BF16)
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_the_bf16_kernel_computes_the_matmul_on_this_cpu(m, n, k):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    got = _run(a, w, BF16)
    want = a.astype(np.float64) @ w.astype(np.float64)
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))  # float32 sums of exact products


@_amx_here(INT8)
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_the_int8_kernel_computes_the_matmul_exactly_on_this_cpu(m, n, k):
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    np.testing.assert_array_equal(_run(a, w, INT8), a.astype(np.int64) @ w.astype(np.int64))


def _run(a, w, kind):
    (m, k), n = a.shape, w.shape[1]
    dev = cpu_device()
    args = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(pack_weight(w, kind), dev),
            tvm.runtime.empty((m, n), kind.acc_dtype, dev)]
    compile_kernel(m, n, k, HOST, kind)["main"](*args)
    return args[2].numpy()
