"""CUDA code generation checked without a GPU.

Every catalog workload, at a small shape, gets a few sampled candidates of the CUDA search space for sm_80 and
sm_90; each is built with ``tvm.compile`` (a real CUDA module, not host code) and its CUDA source is compiled
by nvcc for that architecture. nvcc costs ~1.5 s per file, so the kernels of one architecture go to nvcc in a
few files (one per distinct source prelude, kernels renamed apart) in one call. Nothing here runs a kernel.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autosched._tvm import IRModule, Schedule, te, tvm
from autosched.db import MemoryDatabase
from autosched.errors import InvalidConfig
from autosched.measure.base import TaskIO
from autosched.records import Status
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target, op_task, primfunc_task
from autosched.workloads import CATALOG

ARCHS = ("sm_80", "sm_90")
SMALL_SHAPES = {
    "matmul": (64, 64, 64), "batch_matmul": (2, 32, 32, 32), "dense": (32, 64, 64),
    "conv2d": (1, 16, 16, 16, 16, 3, 3), "depthwise_conv2d": (1, 16, 16, 16, 3, 3), "softmax": (32, 64),
    "layer_norm": (32, 64), "elementwise": (1, 4, 8, 64), "gelu": (1, 4, 8, 64), "gelu_tanh": (1, 4, 8, 64),
    "bias_gelu": (1, 4, 8, 64),
}
N_CANDIDATES = 2  # per workload and architecture
MAX_TRIES = 1500  # tiled kernels: ~1-3 % of uniformly sampled knob settings pass VerifyGPUCode
KERNEL = re.compile(r'__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: CUDA sources cannot be "
                                "compiled here (install the CUDA toolkit)")


@dataclass
class Sampled:
    """Candidates of one task's CUDA space: what was tried, why the rest was rejected, the built sources."""

    n_tried: int = 0
    rejected: Counter = field(default_factory=Counter)
    schedules: list[Schedule] = field(default_factory=list)
    params: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def share_rejected(self) -> float:
        return sum(self.rejected.values()) / self.n_tried if self.n_tried else 0.0


def sample(space: TraceSearchSpace, n: int, seed: int = 0, max_tries: int = MAX_TRIES,
           designs: list[int] | None = None) -> Sampled:
    """Up to ``n`` legal candidates from uniformly random knob settings (of ``designs``, default all)."""
    rng, out = random.Random(seed), Sampled()
    designs = designs if designs is not None else list(range(len(space.designs)))
    while len(out.schedules) < n and out.n_tried < max_tries:
        out.n_tried += 1
        design = rng.choice(designs)
        params = {"design": design, **{k: rng.randint(d.low, d.high) for k, d in space.knobs(design).items()}}
        try:
            out.schedules.append(space.apply(params))
            out.params.append(params)
        except InvalidConfig as err:
            out.rejected[str(err).split(":")[0]] += 1
    return out


def cuda_source(executable) -> str:
    """The CUDA source of a build, asserting it really holds a CUDA module (an unbound schedule would not)."""
    assert [m.kind for m in executable.mod.imports] == ["cuda"]
    return executable.mod.imports[0].inspect_source("cuda")


def nvcc_compile(sources: dict[str, str], arch: str, folder: Path) -> dict[str, bytes]:
    """Compile ``name -> CUDA source`` with one nvcc call: sources with the same prelude share a file, their
    kernels renamed ``<name>_<kernel>``. Returns file -> cubin; asserts nvcc succeeded."""
    groups: dict[str, list[str]] = {}
    for name, src in sources.items():
        start = src.index('extern "C" __global__')
        kernels = sorted(set(KERNEL.findall(src[start:])), key=len, reverse=True)
        body = re.sub(r"\b(" + "|".join(map(re.escape, kernels)) + r")\b", name + r"_\1", src[start:])
        groups.setdefault(src[:start], []).append(body)
    files = []
    for i, (prelude, bodies) in enumerate(groups.items()):
        (folder / f"k{i}.cu").write_text(prelude + "\n".join(bodies))
        files.append(f"k{i}.cu")
    run = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-w", *files], cwd=folder, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return {f: (folder / f.replace(".cu", ".cubin")).read_bytes() for f in files}


def assert_kernels_in(cubins: dict[str, bytes], names: list[str]) -> None:
    blob = b"".join(cubins.values())
    missing = [n for n in names if f".text.{n}".encode() not in blob]
    assert not missing, f"kernels missing from the cubins: {missing}"


# --- every catalog workload, sm_80 and sm_90 -------------------------------------------------------------------
def test_small_shapes_cover_the_catalog():
    assert set(SMALL_SHAPES) == set(CATALOG)


@pytest.fixture(scope="module", params=ARCHS)
def catalog_builds(request) -> tuple[str, dict[str, Sampled]]:
    """arch -> op -> sampled candidates, each built with tvm.compile (asserting a CUDA module)."""
    target = make_target(request.param)
    settings = settings_for(target)
    out = {}
    for op, shape in SMALL_SHAPES.items():
        task = op_task(op, shape, target, settings.version)
        space = TraceSearchSpace(task.mod, target, settings, seed=0)
        # the rules' designs (dlight's, one point, is checked in test_gpu_designs.py)
        found = sample(space, N_CANDIDATES, designs=[d for d in range(len(space.designs))
                                                     if d != space.design_index("dlight")])
        found.sources = [cuda_source(tvm.compile(s.mod, target=target)) for s in found.schedules]
        out[op] = found
    return request.param, out


@pytest.mark.slow
def test_every_workload_builds_cuda_modules_and_reports_rejections(catalog_builds):
    arch, builds = catalog_builds
    short = {op: s.n_tried for op, s in builds.items() if len(s.schedules) < N_CANDIDATES}
    assert not short, f"{arch}: fewer than {N_CANDIDATES} legal candidates in (tries) {short}"
    for op, s in builds.items():  # the share rejected before any build, as the tuner records it (INVALID)
        print(f"{arch} {op}: {s.share_rejected:.0%} of {s.n_tried} rejected before build {dict(s.rejected)}")
        assert set(s.rejected) <= {"rejected by VerifyGPUCode", "schedule primitive failed"}, s.rejected


@pytest.mark.slow
def test_schedules_bind_threads_stage_in_shared_memory_and_reduce_across_threads(catalog_builds):
    _, builds = catalog_builds
    for op in ("matmul", "batch_matmul", "dense", "conv2d"):  # MultiLevelTiling with shared-memory reuse
        trace = "\n".join(builds[op].schedules[0].trace.as_python())
        assert "cooperative_fetch" in trace and "unroll_explicit" in trace, op  # vectorised loads, unrolling
        for src in builds[op].sources:
            assert "__shared__" in src and "threadIdx.x" in src, op  # (one block at these shapes: no blockIdx)
    for op in ("softmax", "layer_norm"):  # reductions: CrossThreadReduction or per-thread loops, both bound
        assert all("threadIdx.x" in src for src in builds[op].sources), op
    assert any("__shfl" in src for op in ("softmax", "layer_norm") for src in builds[op].sources)  # warp reduction
    for op in ("elementwise", "gelu", "gelu_tanh", "bias_gelu"):
        assert all("threadIdx.x" in src for src in builds[op].sources), op


@pytest.mark.slow
@needs_nvcc
def test_every_workload_compiles_with_nvcc(catalog_builds, tmp_path):
    arch, builds = catalog_builds
    sources = {f"{op}{i}": src for op, s in builds.items() for i, src in enumerate(s.sources)}
    cubins = nvcc_compile(sources, arch, tmp_path)
    assert_kernels_in(cubins, [f"{name}_{k}" for name, src in sources.items() for k in set(KERNEL.findall(src))])


# --- limits checked before any build ----------------------------------------------------------------------------
def test_device_limits_reject_candidates_before_build():
    roomy = make_target("sm_80")
    tight = make_target('{"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 64, '
                        '"max_num_threads": 64}')  # the other limits filled in from the A100
    task = op_task("matmul", (128, 128, 128), roomy, settings_for(roomy).version)
    space = TraceSearchSpace(task.mod, roomy, settings_for(roomy), seed=3)
    tight_space = TraceSearchSpace(task.mod, tight, settings_for(tight), seed=3)
    assert tight_space.knobs() == space.knobs()  # same knobs: the same params mean the same schedule
    found = sample(space, 6)
    threads = [int(re.search(r"__launch_bounds__\((\d+)\)", cuda_source(tvm.compile(s.mod, target=roomy))).group(1))
               for s in found.schedules]
    big = [params for params, n in zip(found.params, threads, strict=True) if n > 64]
    assert big, f"no candidate with more than 64 threads sampled: {threads}"
    with pytest.raises(InvalidConfig, match="rejected by VerifyGPUCode"):
        tight_space.apply(big[0])


def test_tune_loop_records_cuda_rejections_as_invalid():
    from autosched.search.optuna_strategy import OptunaStrategy
    from autosched.testing.fakes import NullBuilder, NullRunner
    from autosched.tune import tune_task

    target = make_target("sm_80")
    task = op_task("matmul", (128, 128, 128), target, settings_for(target).version)
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=0)
    db = MemoryDatabase()
    strategy = OptunaStrategy(space, task.key, db.optuna_storage(), "random", 0, max_tries_per_ask=64)
    result = tune_task(task, strategy, NullBuilder(), NullRunner(), db, TaskIO("unused.npz", 1), 8, batch_size=4)
    records = db.records(task.key)
    invalid = [r for r in records if r.status is Status.INVALID]
    print(f"tune loop, sm_80 matmul 128: {len(invalid)} of {len(records)} candidates rejected before build")
    assert result.n_measured == 8 and result.status_counts[Status.INVALID] == len(invalid) > 0
    assert all("VerifyGPUCode" in r.error or "primitive" in r.error for r in invalid)


def test_repair_makes_illegal_settings_of_a_large_kernel_legal_within_the_thread_limits():
    target = make_target("sm_90")
    task = op_task("matmul", (4096, 4096, 4096), target, settings_for(target).version)
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=0)
    rng, illegal = random.Random(0), []
    tiled = [d for d in range(len(space.designs)) if d != space.design_index("dlight")]  # dlight's: one legal point
    for _ in range(24):
        design = rng.choice(tiled)
        params = {"design": design, **{k: rng.randint(d.low, d.high) for k, d in space.knobs(design).items()}}
        try:
            space.apply(params)
        except InvalidConfig:
            illegal.append(params)
    assert len(illegal) >= 20  # uniform settings of this kernel: under 1% legal (a search found nothing to measure)
    repaired = [r[0] for i, params in enumerate(illegal) if (r := space.repair(params, seed=i)) is not None]
    assert len(repaired) >= 0.8 * len(illegal)
    assert len({tuple(sorted(r.items())) for r in repaired}) >= len(repaired) // 2  # not one fixed point
    for params in repaired[:4]:
        source = cuda_source(tvm.compile(space.apply(params).mod, target=target))
        assert 32 <= int(re.search(r"__launch_bounds__\((\d+)\)", source).group(1)) <= 1024
    cpu = make_target("llvm")
    cpu_space = TraceSearchSpace(op_task("matmul", (64, 64, 64), cpu, settings_for(cpu).version).mod, cpu,
                                 settings_for(cpu), seed=0)
    assert cpu_space.repair(cpu_space.default_params()) is None  # CPU rejections stay the sampler's to learn


def test_a_search_of_a_large_gpu_kernel_finds_legal_candidates_to_measure():
    from autosched.search.optuna_strategy import OptunaStrategy
    from autosched.testing.fakes import NullBuilder, NullRunner
    from autosched.tune import tune_task

    target = make_target("sm_90")
    task = op_task("matmul", (4096, 4096, 4096), target, settings_for(target).version)
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=0)
    db = MemoryDatabase()
    strategy = OptunaStrategy(space, task.key, db.optuna_storage(), "tpe", 0)
    result = tune_task(task, strategy, NullBuilder(), NullRunner(), db, TaskIO("unused.npz", 1), 16, batch_size=8)
    assert result.n_measured == 16 and result.status_counts[Status.OK] >= 8  # before repair: 0, space "exhausted"


def test_gpu_builds_get_a_longer_timeout_than_cpu_builds():
    from autosched.config import TuneConfig

    assert TuneConfig().build_timeout_for("cpu") == 3.0 and TuneConfig().build_timeout_for("cuda") == 30.0
    assert TuneConfig(build_timeout_s=7.0).build_timeout_for("cuda") == 7.0


# --- tensor cores ------------------------------------------------------------------------------------------------
def fp16_matmul(n: int, accumulate: str = "float16") -> IRModule:
    """C = A @ B of float16 operands, accumulated (and written) in ``accumulate``: float16 as Relax legalizes a
    float16 matmul, float32 as the mixed-precision rewrite asks."""
    a, b = te.placeholder((n, n), "float16", name="A"), te.placeholder((n, n), "float16", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k].astype(accumulate) * b[k, j].astype(accumulate), axis=k),
                   name="C")
    return IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("accumulate", ["float16", "float32"])  # float32: built only with the output in "shared"
@needs_nvcc
def test_fp16_matmul_gets_tensor_core_designs_that_compile(arch, accumulate, tmp_path):
    target = make_target(arch)
    task = primfunc_task("matmul_fp16", fp16_matmul(128, accumulate), target, settings_for(target).version)
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=0)
    tensor_core = [d for d, t in enumerate(space.designs) if "wmma_sync" in "\n".join(t.as_python())]
    assert tensor_core, "no tensor-core (wmma) design for a float16 matmul"
    sources = {}
    for design in tensor_core:
        rng, sch = random.Random(design), None
        for _ in range(MAX_TRIES):
            params = {"design": design, **{k: rng.randint(d.low, d.high) for k, d in space.knobs(design).items()}}
            try:
                sch = space.apply(params)
                break
            except InvalidConfig:
                continue
        assert sch is not None, f"no legal candidate of tensor-core design {design}"
        src = cuda_source(tvm.compile(sch.mod, target=target))
        assert "wmma::mma_sync" in src and "wmma::load_matrix_sync" in src
        sources[f"tc{design}"] = src
    assert_kernels_in(nvcc_compile(sources, arch, tmp_path),
                      [f"{n}_{k}" for n, src in sources.items() for k in set(KERNEL.findall(src))])


def test_repair_counts_a_tensor_core_designs_warps_as_32_threads_each():
    """A tensor-core design binds warps (threadIdx.x is a warp's 32 lanes, implicit): its repaired blocks fit the
    thread limit counted in threads, and most uniformly drawn settings of a large float16 matmul repair legal (42-61 %
    when warps were counted as threads; bench/cuda_spaces.py)."""
    from autosched.spaces.gpu_repair import warp_size

    target = make_target("sm_90")
    task = primfunc_task("matmul_fp16", fp16_matmul(1024), target, settings_for(target).version)
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=0)
    tensor_core = [d for d in range(len(space.designs)) if d != space.design_index("dlight")]  # dlight's binds threads
    assert [warp_size(space, d) for d in tensor_core] == [32] * 2
    rng, repaired = random.Random(0), []
    for i in range(12):
        design = rng.choice(tensor_core)
        params = {"design": design, **{k: rng.randint(d.low, d.high) for k, d in space.knobs(design).items()}}
        if (fixed := space.repair(params, seed=i)) is not None:
            repaired.append(fixed[1])
    assert len(repaired) >= 9, len(repaired)  # 10 of 12; 7 with warps counted as threads
    for sch in repaired[:2]:
        source = cuda_source(tvm.compile(sch.mod, target=target))
        assert 32 <= int(re.search(r"__launch_bounds__\((\d+)\)", source).group(1)) <= 1024
    fp32 = TraceSearchSpace(op_task("matmul", (256, 256, 256), target, settings_for(target).version).mod, target,
                            settings_for(target), seed=0)
    assert {warp_size(fp32, d) for d in range(len(fp32.designs))} == {1}  # threads bound one by one


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@needs_nvcc
def test_a_low_precision_models_matmuls_get_tensor_core_designs_that_build(precision, tmp_path):
    """--precision fp16 or bf16 on sm_90: the matmuls (float16 / bfloat16 operands, float32 accumulation, bias and
    ReLU fused) get tensor-core designs, and a legal setting of each builds; a width no 16x16 tile divides gets
    none."""
    pytest.importorskip("onnx")
    from onnx_graphs import mlp

    import autosched

    proto = mlp(batch=32, d_in=64, hidden=64, d_out=8)
    path = tmp_path / "mlp.onnx"
    path.write_bytes(proto.SerializeToString())
    tasks = autosched.extract_model_tasks(str(path), "sm_90", precision=precision)
    built = {}
    for task in (t for t in tasks if "matmul" in t.name):
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target), seed=0)
        tensor_core = [d for d, t in enumerate(space.designs) if "wmma_sync" in "\n".join(t.as_python())]
        rng, sources = random.Random(0), []
        for i in range(40):
            if not tensor_core or len(sources) == len(tensor_core):
                break
            design = tensor_core[len(sources)]
            params = {"design": design, **{k: rng.randint(d.low, d.high) for k, d in space.knobs(design).items()}}
            if (fixed := space.repair(params, seed=i)) is not None:
                sources.append(cuda_source(tvm.compile(fixed[1].mod, target=task.target)))
        built[task.name] = (len(tensor_core), sum("wmma::mma_sync" in src for src in sources))
    assert sorted(built.values()) == [(0, 0), (2, 2)], built  # 64 wide: both designs build; 8 wide: no tile


# --- a model through the graph path ----------------------------------------------------------------------------
@pytest.mark.slow
@needs_nvcc
def test_model_builds_every_kernel_for_cuda_and_nvcc_compiles_them(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from autosched._tvm import relax
    from autosched.corpus import zoo
    from autosched.deploy import build
    from autosched.deploy.build import DEFAULT, DLIGHT, compile_model
    from autosched.graph.frontends import load_model

    target = make_target("sm_80")
    module, inputs = zoo.build("tiny_cnn")
    model = load_model(module, example_inputs=inputs, name="tiny_cnn")
    sources = {}
    for name, want in (("l", DLIGHT), ("d", DEFAULT)):  # dlight's schedules; the space's default ones
        if want == DEFAULT:  # as for a kernel no dlight rule schedules
            monkeypatch.setattr(build, "_dlight_schedule", lambda mod, target: None)
        compiled = compile_model(model, target)
        assert want in compiled.sources.values() and set(compiled.sources.values()) <= {DEFAULT, DLIGHT}
        assert isinstance(compiled.executable, relax.VMExecutable)
        host = compiled.executable.mod.imports
        assert [m.kind for m in host] == ["llvm"] and [m.kind for m in host[0].imports] == ["cuda"]
        sources[name] = host[0].imports[0].inspect_source("cuda")
        kernels = set(KERNEL.findall(sources[name]))
        assert all(f"{group}_kernel" in kernels for group in compiled.sources), (compiled.sources, kernels)
    assert_kernels_in(nvcc_compile(sources, "sm_80", tmp_path),
                      [f"{n}_{k}" for n, src in sources.items() for k in set(KERNEL.findall(src))])


# --- on a GPU (skipped without one: tests/conftest.py) ------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("op", ["matmul", "softmax", "conv2d"])
def test_sampled_candidates_compute_the_reference_on_the_gpu(op):
    import numpy as np

    dev = tvm.cuda(0)
    target = make_target("sm_" + dev.compute_version.replace(".", ""))  # this GPU's architecture
    task = op_task(op, SMALL_SHAPES[op], target, settings_for(target).version)
    inputs = task.random_inputs(0)
    want = task.reference(inputs)[0]
    for sch in sample(TraceSearchSpace(task.mod, target, settings_for(target), seed=0), N_CANDIDATES).schedules:
        args = [tvm.runtime.tensor(x, dev) for x in inputs]
        args.append(tvm.runtime.empty(want.shape, str(want.dtype), dev))
        tvm.compile(sch.mod, target=target).mod["main"](*args)
        np.testing.assert_allclose(args[-1].numpy(), want, rtol=1e-3, atol=1e-3)
