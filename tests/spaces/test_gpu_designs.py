"""The CUDA space's known-good points, checked without a GPU: dlight's schedule as a design (every function's
default on a GPU), tensor-core designs for bfloat16, batched matmuls and convolutions (implicit GEMM) with float32
accumulation, and the tensor-core blocks a search measures first. Built with TVM's CUDA code generation and compiled
by nvcc for sm_80 and sm_90; nothing here runs a kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

from autosched._tvm import IRModule, ms, te, topi, tvm
from autosched.config import TuneConfig
from autosched.db import MemoryDatabase
from autosched.errors import InvalidConfig
from autosched.records import Status
from autosched.spaces.settings import settings_for
from autosched.spaces.tensor_core import is_tensor_core_design, tensor_core_seeds
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import max_dynamic_shared_memory
from autosched.tasks import make_target, op_task, primfunc_task
from tests.spaces.test_cuda_codegen import ARCHS, SMALL_SHAPES, assert_kernels_in, cuda_source, needs_nvcc, nvcc_compile


def matmul(dtype: str, n: int, accumulate: str = "float32") -> IRModule:
    a, b = te.placeholder((n, n), dtype, name="A"), te.placeholder((n, n), dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k].astype(accumulate) * b[k, j].astype(accumulate), axis=k),
                   name="C")
    return IRModule({"main": te.create_prim_func([a, b, c])})


def batch_matmul(dtype: str) -> IRModule:
    """An attention-like batched matmul: 12 heads of 128x64 @ 64x128."""
    a, b = te.placeholder((12, 128, 64), dtype, name="A"), te.placeholder((12, 64, 128), dtype, name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((12, 128, 128), lambda n, i, j: te.sum(a[n, i, k].astype("float32") * b[n, k, j].astype("float32"),
                                                          axis=k), name="C")
    return IRModule({"main": te.create_prim_func([a, b, c])})


def conv2d(dtype: str) -> IRModule:
    """A ResNet-50 3x3 convolution (64 channels at 56x56, NHWC), accumulated in float32."""
    x, w = te.placeholder((1, 56, 56, 64), dtype, name="X"), te.placeholder((3, 3, 64, 64), dtype, name="W")
    return IRModule({"main": te.create_prim_func([x, w, topi.nn.conv2d_nhwc(x, w, 1, 1, 1, out_dtype="float32")])})


def space_of(mod: IRModule, arch: str) -> TraceSearchSpace:
    target = make_target(arch)
    return TraceSearchSpace(mod, target, settings_for(target), seed=0)


@pytest.mark.parametrize("arch", ARCHS)
@needs_nvcc
def test_dlights_schedule_is_every_catalog_functions_gpu_default_and_builds(arch, tmp_path):
    """Before, a tiled function's GPU default was None (its designs' own decisions break the GPU's limits)."""
    target, sources = make_target(arch), {}
    for op, shape in SMALL_SHAPES.items():
        space = TraceSearchSpace(op_task(op, shape, target, settings_for(target).version).mod, target,
                                 settings_for(target), seed=0)
        dlight = space.design_index("dlight")
        assert dlight is not None and not space.knobs(dlight), op  # one point, no knobs
        params, sch = space.default_schedule()
        assert params == {"design": dlight}, op
        sources[op] = cuda_source(tvm.compile(sch.mod, target=target))
    assert_kernels_in(nvcc_compile(sources, arch, tmp_path),
                      [f"{n}_{k}" for n, src in sources.items() for k in set(re.findall(
                          r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", src))])


@pytest.mark.parametrize("arch", ARCHS)
@needs_nvcc
def test_float16_matmuls_dlight_design_runs_on_tensor_cores_in_the_opt_in_shared_memory(arch, tmp_path):
    """dlight's 128x128x64 two-stage wmma kernel stages its operands and float32 output in more than the 48 KB of
    shared memory a block gets without asking: the space checks it against the GPU's opt-in limit (TVM's runtime
    asks at launch), and only this design."""
    space = space_of(matmul("float16", 1024), arch)
    dlight = space.design_index("dlight")
    sch = space.apply({"design": dlight})
    source = cuda_source(tvm.compile(sch.mod, target=space.target))
    assert "wmma::mma_sync" in source and "extern __shared__" in source and "float" in source
    assert max_dynamic_shared_memory(space.target) > int(space.target.attrs["max_shared_memory_per_block"])
    plain = [p for p in space._postprocs if not isinstance(p, ms.postproc.VerifyGPUCode)]
    plain.append(ms.postproc.VerifyGPUCode())
    plain[-1]._initialize_with_tune_context(space.context)
    with pytest.raises(InvalidConfig, match="VerifyGPUCode"):  # the 48 KB limit would reject it
        space._schedule(*space.decisions({"design": dlight}), plain)
    assert_kernels_in(nvcc_compile({"dlight": source}, arch, tmp_path),
                      [f"dlight_{k}" for k in set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(",
                                                              source))])


CASES = {"matmul_bf16": lambda: matmul("bfloat16", 512), "batch_matmul_fp16": lambda: batch_matmul("float16"),
         "batch_matmul_bf16": lambda: batch_matmul("bfloat16"), "conv2d_fp16": lambda: conv2d("float16"),
         "conv2d_bf16": lambda: conv2d("bfloat16"), "matmul_fp16": lambda: matmul("float16", 1024)}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@needs_nvcc
def test_tensor_core_seeds_of_bf16_batched_and_conv_kernels_build_with_float32_accumulation(arch, tmp_path):
    """bfloat16 (wmma groups registered by autosched: TVM 0.27 has none), batched matmuls and convolutions
    (implicit GEMM) get wmma designs; the known-good blocks (2x2 warps, 128x64 / 64x128 / 128x128 / 64x64) are legal
    settings of them, and they build and compile with nvcc."""
    sources, launch = {}, {}
    for name, make in CASES.items():
        space = space_of(make(), arch)
        assert any(is_tensor_core_design(t) for t in space.designs), name
        seeds = tensor_core_seeds(space)
        assert seeds, f"{name}: no tensor-core block fits"
        assert all(is_tensor_core_design(space.designs[p["design"]]) for p in seeds)
        source = cuda_source(tvm.compile(space.apply(seeds[0]).mod, target=space.target))
        assert "wmma::mma_sync" in source, name
        assert ("nv_bfloat16" in source) == name.endswith("bf16"), name
        sources[name], launch[name] = source, int(re.search(r"__launch_bounds__\((\d+)\)", source).group(1))
    assert 128 in set(launch.values()) <= {64, 128}, launch  # 2x2 warps (2x1 where a side is an odd number of tiles)
    assert_kernels_in(nvcc_compile(sources, arch, tmp_path),
                      [f"{n}_{k}" for n, src in sources.items() for k in set(re.findall(
                          r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", src))])


def test_a_gpu_search_measures_dlight_then_the_tensor_core_blocks_first():
    from autosched.session import TuningSession
    from autosched.testing.fakes import NullBuilder, NullRunner

    target = make_target("sm_90")
    task = primfunc_task("matmul_fp16", matmul("float16", 256), target, settings_for(target).version)
    db = MemoryDatabase()
    with TuningSession(TuneConfig(n_trials=6, batch_size=6, sampler="random"), target, NullBuilder(),
                       NullRunner()) as session:
        strategy = session.strategy(task, db)
        session.tune(task, db, strategy=strategy, n_trials=6)
    space = strategy.space
    # rejected random fillers of the batch are recorded first; the measured ones in the order they were queued
    measured = [r.params for r in sorted(db.records(task.key), key=lambda r: r.record_id) if r.status is Status.OK]
    seeds = tensor_core_seeds(space)
    assert len(seeds) == 4 and measured[0] == {"design": space.design_index("dlight")}
    assert measured[1:5] == seeds, measured
    assert TraceSearchSpace(task.mod, make_target("llvm"), settings_for(make_target("llvm"))).gpu_seeds() == []


def test_repair_narrows_bfloat16_loads_of_16_elements_to_8():
    """TVM offers bfloat16 cooperative fetches of 16 elements (32 bytes; VerifyGPUCode takes 16): a third of uniform
    settings were rejected for it whatever their tiles (60 % repaired, 92 % now: bench/cuda_spaces.py)."""
    from autosched.search.pool import uniform_params
    from autosched.spaces.gpu_repair import MAX_VECTOR_LOAD, is_vector_load

    space = space_of(matmul("bfloat16", 1024), "sm_90")
    rng, repaired = np.random.default_rng(0), []
    tensor_core = [d for d, t in enumerate(space.designs) if is_tensor_core_design(t)]
    for i in range(12):
        params = uniform_params(space, rng)
        while params["design"] not in tensor_core:
            params = uniform_params(space, rng)
        if (fixed := space.repair(params, seed=i)) is not None:
            repaired.append(fixed[0])
    assert len(repaired) >= 10, len(repaired)  # 4 without narrowing
    loads = [k for d in tensor_core for k in space.categorical_knobs(d) if is_vector_load(k)]
    assert any(16 in k.choices for k in loads)
    assert all(k.choices[p[k.name]] <= MAX_VECTOR_LOAD for p in repaired for k in loads if k.name in p)
