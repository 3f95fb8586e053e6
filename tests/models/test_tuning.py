"""Tuning a whole model for real (tiny budget): baselines recorded, budget shared, resumable, and the
compiled model uses what was tuned and matches ONNX Runtime."""

from __future__ import annotations

import pytest
from conftest import redundant

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.models.build import TUNED, compile_model
from autosched.models.frontends import load_model
from autosched.models.graph import extract_tasks, rewrite
from autosched.models.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.models.tuning import tune_model_tasks
from autosched.session import TuningSession
from autosched.spaces.settings import settings_for
from autosched.tune import BASELINE_DECISIONS

pytest.importorskip("onnxruntime")


def test_tune_model_for_real_then_compile_and_resume(tmp_path, cpu_target):
    model = load_model(redundant()[0])
    tasks = extract_tasks(rewrite(model.mod, cpu_target), cpu_target, settings_for(cpu_target).version)
    db = open_database(str(tmp_path / "model.db"))
    cfg = TuneConfig(n_trials=4, n_threads=1, batch_size=2, cost_model="none", repeat=2, min_repeat_ms=1)
    seen = []
    with TuningSession(cfg, tasks[0].target_json) as session:
        result = tune_model_tasks(session, tasks, db, cfg.n_trials, seen.append)
    assert result.n_new == 4 * len(tasks) - len(tasks)  # the baselines were measured before the count began
    assert sum(s.n_trials for s in result.states) == 4 * len(tasks)
    for task in tasks:
        records = db.records(task.key)
        assert sum(r.decisions == BASELINE_DECISIONS for r in records) == 1
    assert [p.task_name.startswith("untuned build") for p in seen[:len(tasks)]] == [True] * len(tasks)
    estimates = [p.estimated_s for p in seen[len(tasks):]]
    assert seen[-1].n_done == 4 * len(tasks) and estimates[-1] <= estimates[0]
    assert result.estimated_s <= result.untuned_s

    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) == {TUNED}
    inputs = model.random_inputs(1)
    want = run_onnxruntime(onnxruntime_session(model, 1), model, inputs)
    assert max_relative_error(compiled(*inputs), want) < 1e-4

    with TuningSession(cfg, tasks[0].target_json) as session:  # resuming with the same budget: nothing to do
        again = tune_model_tasks(session, tasks, db, cfg.n_trials)
    assert again.n_new == 0
