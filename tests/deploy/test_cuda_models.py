"""Whole models for a CUDA GPU: every fusion group tuned, default or dlight-scheduled, so the build always holds
a CUDA module; the serving call and timing on the GPU's device; exported libraries. Without a GPU the builds
and the host side of the serving call are checked; the tests marked ``gpu`` run the models."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from autosched._tvm import as_python, cpu_device, tvm, tvm_ffi
from autosched.db import MemoryDatabase, TaskRow
from autosched.deploy.build import (
    DEFAULT,
    DLIGHT,
    TUNED,
    UNSCHEDULED,
    apply_database,
    compile_model,
    compile_unscheduled,
    dlight_schedules,
)
from autosched.deploy.library import load_compiled
from autosched.deploy.serving import Caller, DeviceCaller
from autosched.errors import UserInputError
from autosched.graph.passes import extract_tasks, rewrite
from autosched.records import Candidate, MeasureResult, Status
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import device_of
from autosched.tasks import make_target, target_json
from autosched.tune import to_record

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_cnn():
    from autosched.corpus import zoo
    from autosched.graph.frontends import load_model

    module, inputs = zoo.build("tiny_cnn")
    return load_model(module, example_inputs=inputs, name="tiny_cnn")


@pytest.fixture(scope="module")
def sm80():
    return make_target("sm_80")


def cuda_kinds(executable) -> tuple[list[str], list[str]]:
    """Kinds of a Relax build's host modules and of the host's own imports (["llvm"], ["cuda"] for a GPU build)."""
    host = executable.mod.imports
    return [m.kind for m in host], [m.kind for m in host[0].imports] if host else []


def one_tuned_record(model, target) -> tuple[MemoryDatabase, str]:
    """A database holding one measured CUDA schedule (the space's default design) for the model's matmul group."""
    db = MemoryDatabase()
    task = next(t for t in extract_tasks(rewrite(model.mod, target), target, settings_for(target).version)
                if "matmul" in t.name)
    db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, "", task.flops, {}))
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=0)
    params, sch = space.default_schedule()
    trace = as_python(sch.trace.as_json(remove_postproc=False))
    cand = Candidate(task.key, params, space.effective_decisions(sch), trace)
    db.commit([to_record(task, cand, MeasureResult(Status.OK, [1e-5]))])
    return db, task.info["group"]


# --- without a GPU: builds -----------------------------------------------------------------------------------------
def test_device_of_a_target():
    assert device_of(target_json(make_target("sm_80"))) == tvm.cuda(0)
    assert device_of(target_json(make_target("llvm", 1))) == cpu_device()
    assert device_of("not json") == cpu_device()


def test_a_model_builds_for_cuda_with_every_group_scheduled(tiny_cnn, sm80):
    compiled = compile_model(tiny_cnn, sm80)
    assert cuda_kinds(compiled.executable) == (["llvm"], ["cuda"])
    assert compiled.sources and set(compiled.sources.values()) <= {TUNED, DEFAULT, DLIGHT}
    assert compiled.device == tvm.cuda(0)


def test_groups_without_a_record_get_dlights_schedule_before_the_spaces_default(tiny_cnn, sm80):
    # the tuner's baseline on a GPU is dlight's; the space's default ran ResNet-18's 56x56 convolutions 1.07 ms a call
    scheduled, sources, _, _ = apply_database(rewrite(tiny_cnn.mod, sm80), sm80, MemoryDatabase())
    assert set(sources.values()) == {DLIGHT}, sources
    assert all(scheduled[g].attrs.get("tirx.is_scheduled") for g in sources)
    db, tuned_group = one_tuned_record(tiny_cnn, sm80)
    _, sources, _, _ = apply_database(rewrite(tiny_cnn.mod, sm80), sm80, db)
    assert sources == {g: TUNED if g == tuned_group else DLIGHT for g in sources}
    _, on_cpu, _, _ = apply_database(rewrite(tiny_cnn.mod, make_target("llvm", 1)), make_target("llvm", 1), None)
    assert set(on_cpu.values()) == {DEFAULT}  # a CPU keeps the search space's default


def test_groups_without_a_schedule_get_dlights_and_tuned_ones_are_left_alone(tiny_cnn, sm80):
    db, tuned_group = one_tuned_record(tiny_cnn, sm80)
    scheduled, sources, _, _ = apply_database(rewrite(tiny_cnn.mod, sm80), sm80, db, default=False)
    assert sources[tuned_group] == TUNED and Counter(sources.values())[UNSCHEDULED] == len(sources) - 1
    before = dict(sources)
    out = dlight_schedules(scheduled, sm80, sources)
    assert out[tuned_group].same_as(scheduled[tuned_group])  # dlight skipped the tuned kernel
    assert sources == {g: TUNED if g == tuned_group else DLIGHT for g in before}
    assert not scheduled[next(g for g in before if g != tuned_group)].attrs.get("tirx.is_scheduled")  # not mutated
    compiled = compile_model(tiny_cnn, sm80, db, default_schedules=False)
    assert compiled.sources == sources and cuda_kinds(compiled.executable) == (["llvm"], ["cuda"])


def test_a_cuda_graph_build_captures_the_launches_and_a_cpu_build_ignores_the_option(tiny_cnn, sm80):
    graph = compile_model(tiny_cnn, sm80, cuda_graph=True).executable.as_text()
    plain = compile_model(tiny_cnn, sm80).executable.as_text()
    assert "vm.builtin.cuda_graph.run_or_capture" in graph and "cuda_graph" not in plain
    cpu = compile_model(tiny_cnn, make_target("llvm", 1), cuda_graph=True)
    assert "cuda_graph" not in cpu.executable.as_text()


def test_the_untuned_cuda_baseline_is_dlights_everywhere(tiny_cnn, sm80):
    compiled = compile_unscheduled(tiny_cnn, sm80)
    assert set(compiled.sources.values()) == {DLIGHT}
    assert cuda_kinds(compiled.executable) == (["llvm"], ["cuda"])


def test_a_cuda_library_exports_with_its_target(tiny_cnn, sm80, tmp_path):
    import json

    compiled = compile_unscheduled(tiny_cnn, sm80)
    path = compiled.export_library(tmp_path / "model.so")
    meta = json.loads((tmp_path / "model.so.json").read_text())
    assert path.exists() and meta["target"] == target_json(sm80) and meta["sources"] == compiled.sources
    if tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True) is None:
        with pytest.raises(UserInputError, match="is a CUDA build: loading it needs TVM's CUDA runtime"):
            load_compiled(path)


# --- without a GPU: the device serving path, run on the CPU ------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_build(tiny_cnn):
    return compile_unscheduled(tiny_cnn, make_target("llvm", 1))


def test_a_caller_for_a_gpu_is_a_device_caller(cpu_build):
    fn = cpu_build._vm()[cpu_build.entry]
    assert type(Caller(fn, cpu_build.inputs)) is Caller
    assert type(Caller(fn, cpu_build.inputs, cpu_device())) is Caller
    assert type(Caller.__new__(Caller, fn, cpu_build.inputs, tvm.cuda(0))) is DeviceCaller  # no GPU memory here


def test_the_device_serving_path_copies_in_and_out(cpu_build, tiny_cnn):
    import torch

    caller = DeviceCaller(cpu_build._vm()[cpu_build.entry], cpu_build.inputs, cpu_device())  # the GPU path, on CPU
    x = tiny_cnn.random_inputs(0)[0]
    want = cpu_build(x)[0].copy()
    for arg in (x, x.astype("float64"), np.asfortranarray(x), torch.from_numpy(x)):
        got = caller([arg])[0]
        assert isinstance(got, torch.Tensor if isinstance(arg, torch.Tensor) else np.ndarray)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    first, second = caller([x])[0], caller([x + 1])[0]
    assert not np.shares_memory(first, second)
    out, out_torch = np.empty_like(want), torch.empty(want.shape)
    assert caller([x], out=[out])[0] is out and caller([x], out=[out_torch])[0] is out_torch
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(out_torch.numpy(), want, rtol=1e-6)
    with pytest.raises(UserInputError, match="the model takes 1 inputs"):
        caller([x, x])
    with pytest.raises(UserInputError, match="must have shape"):
        caller([x[0]])
    with pytest.raises(UserInputError, match=r"out\[0\] must have shape"):
        caller([x], out=[np.empty((1,), "float32")])


# --- on a GPU (skipped without one: tests/conftest.py) ------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_target():
    return make_target("sm_" + tvm.cuda(0).compute_version.replace(".", ""))  # this GPU's architecture


@pytest.mark.gpu
def test_a_model_on_the_gpu_matches_its_cpu_build_and_times(tiny_cnn, cpu_build, gpu_target):
    import torch

    compiled = compile_model(tiny_cnn, gpu_target)
    assert compiled.device == tvm.cuda(0)
    for seed in range(2):
        x = tiny_cnn.random_inputs(seed)
        np.testing.assert_allclose(compiled(*x)[0], cpu_build(*x)[0], rtol=1e-3, atol=1e-4)
    x = tiny_cnn.random_inputs(0)
    want = cpu_build(*x)[0]
    got = compiled(*[torch.from_numpy(a) for a in x])[0]
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-3, atol=1e-4)
    if torch.cuda.is_available():  # a CUDA build of PyTorch: tensors on the GPU in, on the GPU out
        got = compiled(*[torch.from_numpy(a).cuda() for a in x])[0]
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-3, atol=1e-4)
    times = compiled.time(x, n_threads=1, repeat=3, min_repeat_ms=1)
    assert len(times) == 3 and all(t > 0 for t in times)


@pytest.mark.gpu
def test_a_cuda_graph_build_matches_and_replays(tiny_cnn, cpu_build, gpu_target):
    compiled = compile_model(tiny_cnn, gpu_target, cuda_graph=True)
    for seed in range(3):  # the first call captures, the others replay the graph on new inputs
        x = tiny_cnn.random_inputs(seed)
        np.testing.assert_allclose(compiled(*x)[0], cpu_build(*x)[0], rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_a_gpu_library_loads_and_runs_on_the_gpu(tiny_cnn, cpu_build, gpu_target, tmp_path):
    compiled = compile_model(tiny_cnn, gpu_target)
    loaded = load_compiled(compiled.export_library(tmp_path / "model.so"))
    assert loaded.device == tvm.cuda(0) and loaded.sources == compiled.sources
    x = tiny_cnn.random_inputs(1)
    np.testing.assert_allclose(loaded(*x)[0], cpu_build(*x)[0], rtol=1e-3, atol=1e-4)
    assert all(t > 0 for t in loaded.time(x, n_threads=1, repeat=2, min_repeat_ms=1))
