"""The tune loop with fakes: budget, resume, interruption, failures as data, exhaustion."""

from __future__ import annotations

import pytest

from autosched.db import MemoryDatabase
from autosched.measure.base import TaskIO
from autosched.records import Status
from autosched.search.optuna_strategy import OptunaStrategy, seen_from_records
from autosched.testing.fakes import NullBuilder, NullRunner, ReplayRunner
from autosched.tune import tune_task

IO = TaskIO("unused.npz", 1)


def _tune(task, space, db, runner, n_trials, seed=0, builder=None, progress=None):
    strategy = OptunaStrategy(space, task.key, db.optuna_storage(), "tpe", seed,
                              seen=seen_from_records(db.records(task.key)))
    return tune_task(task, strategy, builder or NullBuilder(), runner, db, IO, n_trials, batch_size=4,
                     on_progress=progress)


def test_runs_exactly_the_budget_and_stores_every_measurement(matmul_task, matmul_space):
    db, runner, seen = MemoryDatabase(), NullRunner(), []
    result = _tune(matmul_task, matmul_space, db, runner, 10, progress=seen.append)
    assert runner.n_run == 10 == result.n_new == db.n_measured(matmul_task.key)
    assert [p.n_done for p in seen] == [4, 8, 10]
    best = min(r.latency_s for r in db.records(matmul_task.key) if r.status is Status.OK)
    assert result.best.latency_s == best == seen[-1].best_latency_s
    rec = result.best
    assert rec.trace_json and rec.decisions and rec.tvm_version and rec.space_version == matmul_task.space_version


def test_rerun_resumes_instead_of_starting_over(matmul_task, matmul_space):
    db = MemoryDatabase()
    _tune(matmul_task, matmul_space, db, NullRunner(), 8)
    runner = NullRunner()
    result = _tune(matmul_task, matmul_space, db, runner, 12)
    assert runner.n_run == 4 and result.n_measured == 12 and result.n_new == 4
    keys = [r.decisions.__repr__() for r in db.records(matmul_task.key)]
    assert len(set(keys)) == len(keys)  # the resumed run did not re-measure earlier schedules
    again = NullRunner()
    _tune(matmul_task, matmul_space, db, again, 12)
    assert again.n_run == 0


def test_failed_candidates_cost_one_trial_each_and_are_recorded(matmul_task, matmul_space):
    statuses = iter([Status.RUN_ERROR, Status.TIMEOUT, Status.WRONG_RESULT] + [Status.OK] * 100)
    db = MemoryDatabase()
    result = _tune(matmul_task, matmul_space, db, NullRunner(status_fn=lambda c: next(statuses)), 8)
    recs = db.records(matmul_task.key)
    assert [r.status for r in recs[:3]] == [Status.RUN_ERROR, Status.TIMEOUT, Status.WRONG_RESULT]
    assert all(r.error for r in recs[:3]) and len(recs) == 8
    assert result.status_counts[Status.OK] == 5 and result.best.status is Status.OK


def test_interrupt_keeps_only_fully_measured_batches(matmul_task, matmul_space):
    db = MemoryDatabase()
    calls = {"n": 0}

    class InterruptingRunner(NullRunner):
        def run(self, builds, io):
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return super().run(builds, io)

    with pytest.raises(KeyboardInterrupt):
        _tune(matmul_task, matmul_space, db, InterruptingRunner(), 12)
    assert db.n_measured(matmul_task.key) == 4  # the first batch only
    study = db.optuna_storage().get_all_studies()[0]
    states = [t.state.name for t in db.optuna_storage().get_all_trials(study._study_id)]
    assert states.count("COMPLETE") == 4 and "RUNNING" not in states


def test_replay_runner_reproduces_a_run(matmul_task, matmul_space):
    db = MemoryDatabase()
    first = _tune(matmul_task, matmul_space, db, NullRunner(), 8, seed=3)
    db2 = MemoryDatabase()
    replay = _tune(matmul_task, matmul_space, db2, ReplayRunner(db.records()), 8, seed=3)
    assert [r.decisions for r in db2.records()] == [r.decisions for r in db.records()]
    assert replay.best.latency_s == first.best.latency_s


def test_space_with_a_single_schedule_finishes_early(cpu_target):
    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import op_task

    task = op_task("elementwise", (8, 16), cpu_target, 1)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target))
    db, runner = MemoryDatabase(), NullRunner()
    result = _tune(task, space, db, runner, 20)
    assert runner.n_run == space.size() == result.n_new
