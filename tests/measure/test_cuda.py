"""Tuning for a CUDA GPU: the reference computed by this CPU, an untuned baseline that really builds for the GPU,
and (on a machine with a GPU, tests marked ``gpu``) a real tuning run measured on it."""

from __future__ import annotations

import numpy as np
import pytest

from autosched._tvm import IRModule, te, tvm
from autosched.apply import schedule_from_record, untuned
from autosched.config import TuneConfig
from autosched.records import Status, TuningRecord
from autosched.session import TuningSession
from autosched.spaces.settings import settings_for
from autosched.tasks import make_target, op_task, primfunc_task
from autosched.tune import BASELINE_DECISIONS
from autosched.workloads import CATALOG

SMALL = {"matmul": (64, 64, 64), "conv2d": (1, 16, 16, 16, 16, 3, 3), "softmax": (32, 64), "layer_norm": (32, 64),
         "gelu": (1, 4, 8, 64)}


def fp16_matmul(n: int) -> IRModule:
    a, b = te.placeholder((n, n), "float16", name="A"), te.placeholder((n, n), "float16", name="B")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return IRModule({"main": te.create_prim_func([a, b, c])})


def cuda_imports(mod: IRModule, target) -> list[str]:
    return [m.kind for m in tvm.compile(mod, target=target).mod.imports]


@pytest.mark.parametrize("op", sorted(SMALL))
def test_the_untuned_baseline_builds_a_cuda_module(op):
    """An unscheduled kernel compiles silently to host code for a GPU (no thread bound): the baseline gets
    dlight's default GPU schedule; on a CPU it stays the unscheduled kernel."""
    assert op in CATALOG
    gpu = make_target("sm_80")
    task = op_task(op, SMALL[op], gpu, settings_for(gpu).version)
    assert cuda_imports(untuned(task.mod, gpu), gpu) == ["cuda"]
    cpu = make_target("llvm")
    assert untuned(task.mod, cpu) is task.mod


def test_a_baseline_record_replays_as_the_gpu_default_schedule():
    gpu = make_target("sm_90")
    task = op_task("softmax", SMALL["softmax"], gpu, settings_for(gpu).version)
    record = TuningRecord(task.key, task.target_json, {"baseline": "unscheduled"}, list(BASELINE_DECISIONS), None,
                          Status.OK, [1e-5], None, "0", "0.27.0", task.space_version)
    assert cuda_imports(schedule_from_record(task.mod, record).mod, gpu) == ["cuda"]


def test_a_gpu_task_without_a_numpy_reference_is_checked_against_this_cpu():
    """A PrimFunc tuned for a GPU: its reference outputs come from the unscheduled function built for and run on
    this machine's CPU (no GPU needed), and the runner measures on the GPU device."""
    gpu = make_target("sm_80")
    task = primfunc_task("matmul_fp16", fp16_matmul(64), gpu, settings_for(gpu).version)
    assert task.reference is None
    with TuningSession(TuneConfig(n_threads=1), task.target_json) as session:
        assert session.device == "cuda" and session.runner.device == "cuda"
        io = session.prepare_io(task)
        data = np.load(io.io_path)
        a, b = (data[k].astype(np.float32) for k in ("in0", "in1"))
        assert data["out0"].dtype == np.float16 and task.info["check"].startswith("full")
        np.testing.assert_allclose(data["out0"].astype(np.float32), a @ b, rtol=2e-2, atol=0.1)


# --- on a GPU (skipped without one: tests/conftest.py) ------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.slow
def test_tuning_a_matmul_on_the_gpu_records_checked_measurements(tmp_path):
    from autosched.api import best_module, tune_operator

    dev = tvm.cuda(0)
    arch = "sm_" + dev.compute_version.replace(".", "")
    result = tune_operator("matmul", (256, 256, 256), arch, db=str(tmp_path / "gpu.db"),
                           config=TuneConfig(n_trials=16, cost_model="none", seed=0))
    assert result.best_latency_s < float("inf")
    mod = best_module(str(tmp_path / "gpu.db"), result.task.key)
    a, b = np.random.rand(256, 256).astype("float32"), np.random.rand(256, 256).astype("float32")
    args = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), tvm.runtime.empty((256, 256), "float32", dev)]
    tvm.compile(mod, target=make_target(arch)).mod["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), a @ b, rtol=1e-3, atol=1e-3)
