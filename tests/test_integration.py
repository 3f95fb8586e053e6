"""Real tuning on tiny budgets: TVM builds, isolated measurement, SQLite, then re-applying the best record."""

from __future__ import annotations

import numpy as np
import pytest

from autosched._tvm import cpu_device, load_json, structural_equal, tvm
from autosched.apply import schedule_from_record
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.records import Status
from autosched.session import TuningSession
from autosched.spaces.settings import settings_for
from autosched.tasks import op_task

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("op,shape", [("matmul", (64, 64, 64)),  # the second operator: CI's long step
                                      pytest.param("conv2d", (1, 8, 14, 14, 16, 3, 3), marks=pytest.mark.long)])
def test_tune_then_reapply_best_record(tmp_path, cpu_target, op, shape):
    task = op_task(op, shape, cpu_target, settings_for(cpu_target).version)
    db = open_database(str(tmp_path / "t.db"))
    cfg = TuneConfig(n_trials=12, batch_size=6, n_threads=1, min_repeat_ms=5, seed=1)
    with TuningSession(cfg, task.target_json) as session:
        baseline = session.measure_unscheduled(task)
        result = session.tune(task, db)
    assert result.n_new == 12 and db.n_measured(task.key) == 12
    assert result.status_counts[Status.OK] >= 10
    assert result.best_latency_s < baseline.latency_s  # tuning beat TVM's unscheduled build

    # the stored workload + best trace rebuild the same kernel, which computes the right thing
    row = db.task(task.key)
    best = db.best(task.key, task.target_json)
    mod = load_json(row.workload_json)
    assert structural_equal(mod, task.mod)
    sch = schedule_from_record(mod, best)
    sch_again = schedule_from_record(task.mod, best)
    assert structural_equal(sch.mod, sch_again.mod)
    lib = tvm.compile(sch.mod, target=task.target).mod
    dev = cpu_device()
    inputs = task.random_inputs(5)
    out = tvm.runtime.empty(task.arg_specs()[-1][0], "float32", dev)
    lib["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], out)
    np.testing.assert_allclose(out.numpy(), task.reference(inputs)[0], rtol=1e-3, atol=1e-3)


def test_primfunc_task_uses_the_unscheduled_build_as_reference(tmp_path, cpu_target):
    from autosched.tasks import primfunc_task
    from autosched.workloads import get_workload

    mod = get_workload("softmax").prim_func((8, 64))
    task = primfunc_task("softmax_from_relax", mod, cpu_target, settings_for(cpu_target).version)
    assert task.reference is None and task.flops > 0
    cfg = TuneConfig(n_trials=4, batch_size=4, n_threads=1, min_repeat_ms=1, build_timeout_s=60)  # loaded CI
    db = open_database(":memory:")
    with TuningSession(cfg, task.target_json) as session:
        result = session.tune(task, db)
    assert result.status_counts[Status.OK] == 4


def test_resumed_run_warms_the_online_model_with_earlier_measurements(tmp_path, cpu_target):
    from autosched.cost import FeatureExtractor
    from autosched.search.screen import ModelScreen
    from autosched.session import warm_screen
    from autosched.spaces.trace_space import TraceSearchSpace

    task = op_task("matmul", (32, 32, 32), cpu_target, settings_for(cpu_target).version)
    db = open_database(str(tmp_path / "r.db"))
    cfg = TuneConfig(n_trials=6, batch_size=6, n_threads=1, min_repeat_ms=1, cost_model="none")
    with TuningSession(cfg, task.target_json) as session:
        session.tune(task, db)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target))
    screen = ModelScreen(FeatureExtractor(space.context), min_train=4)
    warm_screen(screen, task, db.records(task.key))
    assert len(screen._features) == 6 and screen.ready  # an online model fitted on the replayed records
