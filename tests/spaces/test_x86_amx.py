"""The AMX bf16 matmul kernel: it generates AMX tile instructions for a CPU that has them (code generation only:
runs on any x86 host), packs weights as the tiles read them, and, on a CPU with AMX, computes the matmul."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from autosched._tvm import IRModule, cpu_device, tvm
from autosched.spaces.x86_amx import amx_bf16_matmul, compile_kernel, fits, has_amx_bf16, pack_weight
from autosched.targets import make_target

SAPPHIRE_RAPIDS = make_target('{"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 1}')
SKYLAKE = make_target('{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}')
HOST = make_target("llvm", 2)
amx_here = pytest.mark.skipif(not has_amx_bf16(HOST), reason="this CPU has no AMX bf16 (or Linux refuses it)")


def test_the_kernel_generates_amx_tile_instructions():
    mod = IRModule({"main": amx_bf16_matmul(64, 64, 96).with_attr("global_symbol", "main")})
    asm = tvm.compile(mod, target=SAPPHIRE_RAPIDS).mod.inspect_source("asm")
    assert asm.count("tdpbf16ps") >= 4  # the 2 x 2 tiles of one 32 x 32 block
    assert "ldtilecfg" in asm and "tileloadd" in asm and "tilestored" in asm


def test_only_targets_with_amx_bf16_qualify():
    assert has_amx_bf16(SAPPHIRE_RAPIDS)  # another CPU than this one: the target decides
    assert not has_amx_bf16(SKYLAKE)
    assert not has_amx_bf16(make_target("cuda"))


def test_n_and_k_must_be_multiples_of_the_block():
    assert fits(64, 96) and not fits(48, 96) and not fits(64, 80)
    with pytest.raises(ValueError, match="multiples of 32"):
        amx_bf16_matmul(32, 48, 64)


def test_weights_are_packed_as_amx_reads_them():
    k, n = 64, 96
    w = np.arange(k * n, dtype=np.float32).reshape(k, n)
    packed = pack_weight(w)
    assert packed.shape == (n // 32, k // 2, 32, 2)
    kk, jj = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    np.testing.assert_array_equal(packed[jj // 32, kk // 2, jj % 32, kk % 2], w)


@amx_here
@pytest.mark.parametrize("m, n, k", [(32, 32, 32), (64, 96, 128), (128, 64, 768), (1, 64, 64), (13, 32, 96),
                                     (16, 64, 32), (45, 64, 64), (197, 96, 64)])  # whole blocks, and last rows
def test_the_kernel_computes_the_matmul_on_this_cpu(m, n, k):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    dev = cpu_device()
    args = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(pack_weight(w), dev),
            tvm.runtime.empty((m, n), "float32", dev)]
    compile_kernel(m, n, k, HOST)["main"](*args)
    want = a.astype(np.float64) @ w.astype(np.float64)
    assert np.max(np.abs(args[2].numpy() - want)) <= 1e-5 * np.max(np.abs(want))  # float32 sums of exact products
