"""The end-to-end phase: schedules timed inside the model, the faster combination kept, compile applying it."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
import pytest

from autosched import api
from autosched.config import TuneConfig
from autosched.db import MemoryDatabase, Selection, open_database
from autosched.deploy import in_model
from autosched.deploy.build import compile_model
from autosched.measure import worker
from autosched.records import Status, TuningRecord
from autosched.scheduler.model_tuning import tune_model_tasks
from autosched.scheduler.task_scheduler import TaskState
from autosched.session import TuningSession
from autosched.tasks import make_target, op_task
from autosched.tune import BASELINE_DECISIONS

pytest.importorskip("torch")

CONFIG = TuneConfig(n_trials=6, n_threads=1, batch_size=4, cost_model="none", repeat=2, min_repeat_ms=1, in_model=0)


def _record(task, latency_s: float, decisions: list, created_at: float = 0.0, trace=None) -> TuningRecord:
    from autosched._tvm import TVM_VERSION

    return TuningRecord(task.key, task.target_json, {}, decisions, trace, Status.OK, [latency_s], None, "0",
                        TVM_VERSION, 1, created_at=created_at or time.time())


# --- which tasks and which schedules: no builds ---------------------------------------------------------------
def test_the_heaviest_tasks_by_their_time_inside_the_model_until_they_cover_most_of_it():
    assert in_model._heaviest({"a": 0.3, "b": 0.5, "c": 0.05, "d": 0.15}) == ["b", "a", "d"]  # 0.8 < 0.9 of 1.0
    keys = {"conv": "k1", "dense": "k2"}
    assert in_model._task_profile({"conv_prepacked": 2.0, "dense": 1.0, "vm.builtin.x": 5.0}, keys) == {
        "k1": 2.0, "k2": 1.0}


def test_variants_start_with_what_the_database_had_then_the_fastest_distinct_alone():
    db, task = MemoryDatabase(), op_task("matmul", (16, 16, 16), make_target("llvm", 1), 1)
    old = _record(task, 2.0, [1])
    db.commit([old, _record(task, 1.0, [2]), _record(task, 1.0, [2]), _record(task, 1.2, [3]),
               _record(task, 1.6, [4]), _record(task, 1.1, [5])])
    picked = in_model._variants(db, task, old, 4, 1.5)
    assert [r.decisions for r in picked] == [[1], [2], [5], [3]]  # [2] once; [4] is slower alone than the limit
    assert [r.decisions for r in in_model._variants(db, task, None, 2, 1.5)] == [[2], [5]]


def test_a_task_with_nothing_but_its_untuned_baseline_is_left_to_its_default_schedule():
    """A budget that ran out after the baselines: the phase neither builds nor stores the untuned kernel for it
    (compile gives such a group its default schedule, 5-10x faster; a segmentation UNet ran 27x ONNX Runtime's time
    when the phase kept the baselines)."""
    db, task = MemoryDatabase(), op_task("matmul", (16, 16, 16), make_target("llvm", 1), 1)
    db.commit([_record(task, 1.0, BASELINE_DECISIONS, created_at=1.0)])
    assert in_model._best(db, task) is None and in_model._before_run(db, task, run_started=2.0) is None
    db.commit([_record(task, 3.0, [1], created_at=1.5, trace=[])])  # a schedule measured, slower than untuned
    assert in_model._best(db, task).decisions == BASELINE_DECISIONS
    assert in_model._before_run(db, task, run_started=2.0).decisions == BASELINE_DECISIONS


# --- the database keeps the choice ---------------------------------------------------------------------------
def test_a_selection_replaces_the_earlier_one_and_an_older_database_gains_the_table_on_first_write(tmp_path):
    path = tmp_path / "sel.db"
    db = open_database(str(path))
    task = op_task("matmul", (16, 16, 16), make_target("llvm", 1), 1)
    from autosched.db import TaskRow

    db.commit_task(TaskRow(task.key, task.name, task.target_json, 1, "{}", 1.0, {}))
    db.commit([_record(task, 1.0, [1]), _record(task, 2.0, [2])])
    first, second = db.records(task.key)
    import sqlalchemy as sa

    with db.engine.begin() as conn:  # as a database written before selections existed
        conn.execute(sa.text("DROP TABLE autosched_selections"))
    db.close()
    db = open_database(str(path))
    assert db.selection(task.key) is None and db.selected(task.key) is None  # no table: nothing chosen
    assert not sa.inspect(db.engine).has_table("autosched_selections")  # and reading made none
    db.select([Selection(task.key, task.target_json, first.record_id, "m", None, 1.0)])
    db.select([Selection(task.key, task.target_json, second.record_id, "m", 2.0, 3.0)])
    db.close()
    again = open_database(str(path))
    assert again.selected(task.key, task.target_json).record_id == second.record_id
    assert again.selection(task.key).in_model_s == 2.0 and again.selected(task.key, "another target") is None


def test_an_export_carries_the_selection_and_an_import_points_it_at_the_same_schedule(tmp_path):
    from autosched.db import TaskRow
    from autosched.db.transfer import export_jsonl, import_jsonl, read_jsonl

    db, task = MemoryDatabase(), op_task("matmul", (16, 16, 16), make_target("llvm", 1), 1)
    db.commit_task(TaskRow(task.key, task.name, task.target_json, 1, "{}", 1.0, {}))
    db.commit([_record(task, 1.0, [1]), _record(task, 2.0, [2])])
    db.select([Selection(task.key, task.target_json, db.records()[1].record_id, "m", 2.5, 3.0)])
    export_jsonl(db, tmp_path / "x.jsonl")
    other = open_database(str(tmp_path / "other.db"))
    other.commit_task(TaskRow(task.key, task.name, task.target_json, 1, "{}", 1.0, {}))
    other.commit([_record(task, 9.0, [9])])  # ids differ from the exporter's
    import_jsonl(other, *read_jsonl(tmp_path / "x.jsonl"))
    assert other.selected(task.key, task.target_json).decisions == [2]
    assert other.selection(task.key).in_model_s == 2.5


# --- for real: a tiny CNN ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tuned_cnn(tmp_path_factory):
    """zoo:tiny_cnn tuned briefly (no end-to-end phase): (plan, database path, the heaviest task, its best)."""
    path = tmp_path_factory.mktemp("in_model") / "cnn.db"
    plan = api.plan_model("zoo:tiny_cnn", "llvm", CONFIG)
    with api.tuning_database(str(path), plan.tasks) as db, TuningSession(plan.config, plan.target) as session:
        result = tune_model_tasks(session, plan.tasks, db, CONFIG.n_trials)
        heavy = max(result.states, key=lambda s: s.contribution_s)
        best = db.best(heavy.task.key, heavy.task.target_json)
    return plan, path, heavy.task, best


def _phase(plan, db, run_started: float):
    config = replace(CONFIG, in_model=4)
    with TuningSession(config, plan.target) as session:
        states = [TaskState(t, 1.0, (b.latency_s if (b := db.best(t.key, t.target_json)) else 1.0), 1)
                  for t in plan.tasks]
        return in_model.tune_in_model(session, plan.model, plan.fused, states, db, run_started)


def _doctored(db, task, best, created_at: float) -> TuningRecord:
    """The task's untuned build (tens of times slower than its best) recorded as 10x faster than the best alone."""
    untuned = next(r for r in db.records(task.key) if r.decisions == BASELINE_DECISIONS)
    fake = replace(untuned, latencies_s=[best.latency_s / 10], created_at=created_at, record_id=None)
    db.commit([fake])
    return db.best(task.key, task.target_json)


@pytest.mark.slow
def test_a_schedule_fastest_alone_but_slow_in_the_model_is_replaced(tuned_cnn, tmp_path):
    plan, path, task, best = tuned_cnn
    db = open_database(str(_copy(path, tmp_path)))
    fake = _doctored(db, task, best, created_at=time.time() - 60)  # what the database held before this run
    result = _phase(plan, db, run_started=time.time())
    assert result is not None and result.kept_new and result.new_s < result.before_s
    assert db.selected(task.key, task.target_json).record_id != fake.record_id  # compile will not apply it
    assert db.best(task.key, task.target_json).record_id == fake.record_id  # (it is still the fastest alone)
    assert task.key in result.in_model_s and task.name in result.changed


@pytest.mark.slow
def test_more_tuning_never_applies_a_new_schedule_that_is_slower_in_the_model(tuned_cnn, tmp_path):
    plan, path, task, best = tuned_cnn
    db = open_database(str(_copy(path, tmp_path)))
    started = time.time()
    fake = _doctored(db, task, best, created_at=started + 1)  # found "by this run"
    _phase(plan, db, run_started=started)
    assert db.selected(task.key, task.target_json).record_id != fake.record_id  # the database's, or one as good
    compiled = compile_model(plan.model, plan.target, db, fused=plan.fused)
    doctored = compile_model(plan.model, plan.target, db, fused=plan.fused, chosen={task.key: fake})
    x = plan.model.random_inputs(0)
    assert np.median(compiled.time(x, 1, repeat=7, min_repeat_ms=20)) < np.median(doctored.time(x, 1, 7, 20))


def test_a_variant_whose_outputs_differ_is_never_timed(tuned_cnn, tmp_path):
    plan, path, task, best = tuned_cnn
    db = open_database(str(path))
    compiled = compile_model(plan.model, plan.target, db, fused=plan.fused)
    name = next(n for n, k in compiled.keys.items() if k == task.key)
    sites = in_model.call_sites(plan.fused)[name]
    with TuningSession(CONFIG, plan.target) as session:
        (build,) = in_model._build_variants(session, task, [best])
        model_path = in_model._export(compiled, str(tmp_path), "m")
        io, consts = str(tmp_path / "io.npz"), str(tmp_path / "c.npz")
        worker.save_io(io, {f"in{i}": a for i, a in enumerate(plan.model.random_inputs(0))})
        worker.save_io(consts, {f"{name}|{i}|{p}": np.zeros_like(a) for i, c in enumerate(sites) for p, a in c.items()})
        plan_path = tmp_path / "plan.json"
        plan_path.write_text(json.dumps({name: {"variants": [build["path"]], "calls": [sorted(c) for c in sites]},
                                         "constants": consts}))
        samples = worker.time_in_model(model_path, "main", io, str(plan_path), 6)
    assert len(samples[name][0]) == 6 and samples[name][1] == []  # zero weights: wrong outputs, so never timed


def _copy(path, folder):
    import shutil

    return shutil.copy(path, folder / "copy.db")
