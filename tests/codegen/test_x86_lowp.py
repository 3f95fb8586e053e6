"""Low-precision x86 tensor intrinsics: a packed bf16 / int8 dense tensorized with them generates AVX-512 BF16
``vdpbf16ps`` / VNNI ``vpdpbusd`` code for a CPU that has them (code generation only: it runs anywhere), and
their portable twins, same description and layout, compute the right values on this CPU."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from autosched._tvm import Target, cpu_device, tvm
from autosched.codegen.x86_lowp import packed_dense, register_lowp_intrins, tensorized_dense
from autosched.targets import make_target

M, N, K = 16, 64, 128  # divisible by every tile of tensorized_dense (4 x 4 grid, 16-deep k)
INTRINS = register_lowp_intrins()
ZEN5 = Target({"kind": "llvm", "mcpu": "znver5", "num-cores": 1})


def _asm(mod, target) -> str:
    lib = tvm.compile(mod, target=target)
    return lib.mod.inspect_source("asm") if hasattr(lib.mod, "inspect_source") else lib.mod.get_source("asm")


@pytest.mark.parametrize("kind, kk, instruction", [("bf16", 2, "vdpbf16ps"), ("int8", 4, "vpdpbusd")])
def test_the_real_intrinsic_generates_the_instruction_on_zmm(kind, kk, instruction):
    sch = tensorized_dense(packed_dense(M, N, K, kind), INTRINS[kind], kk)
    asm = _asm(sch.mod, ZEN5)
    assert asm.count(instruction) >= 4  # one per accumulator of the unrolled 4 x 4 grid (at least)
    assert re.search(rf"\b{instruction}\s+[^\n]*%zmm", asm), f"{instruction} on zmm registers"


def _data(kind, rng):
    if kind == "bf16":
        a = rng.standard_normal((M, K), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((N, K), dtype=np.float32).astype(ml_dtypes.bfloat16)
        return a, b, a.astype(np.float64) @ b.astype(np.float64).T, 2, "float32"
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (N, K), dtype=np.int8)
    return a, b, a.astype(np.int64) @ b.astype(np.int64).T, 4, "int32"


@pytest.mark.parametrize("kind", ["bf16", "int8"])
def test_the_portable_twin_computes_the_dense_on_this_cpu(kind):
    a, b, want, kk, out_dtype = _data(kind, np.random.default_rng(0))
    packed = np.ascontiguousarray(b.reshape(N // 16, 16, K // kk, kk).transpose(0, 2, 1, 3))
    sch = tensorized_dense(packed_dense(M, N, K, kind), INTRINS[f"{kind}_ref"], kk)
    lib = tvm.compile(sch.mod, target=make_target("llvm", 1))  # this CPU: its features, less what it lacks
    dev = cpu_device()
    args = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(packed, dev), tvm.runtime.empty((M, N), out_dtype, dev)]
    lib["main"](*args)
    got = args[2].numpy().astype(np.float64)
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))  # int8: exact; bf16: float32 sums
