"""Many workers, one study: three `autosched tune` processes, the same command, on one database tune one model
together. No task has two workers at once, nothing is lost or measured twice, together they spend the budget one
worker would, and every task ends tuned."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_model_tuning import FakeSession

from autosched._tvm import TVM_VERSION
from autosched.db import MemoryDatabase, open_database
from autosched.records import Status, TuningRecord, schedule_key
from autosched.scheduler.model_tuning import tune_model_tasks
from autosched.search.optuna_strategy import OWNER_ATTR
from autosched.search.study import load_task_study
from autosched.spaces.settings import settings_for
from autosched.tasks import op_task
from autosched.tune import BASELINE_DECISIONS

ROOT = Path(__file__).resolve().parents[2]
N_WORKERS, TRIALS, BATCH = 3, 8, 2  # 8: each task has its defaults (up to 4) measured and a search round


# --- the loop's part, with fakes: no TVM builds ------------------------------------------------------------------
def test_a_worker_skips_the_task_another_holds_leaves_it_its_trials_and_waits_for_its_round(cpu_target):
    version = settings_for(cpu_target).version
    heavy, light = (op_task("matmul", shape, cpu_target, version) for shape in ((16, 16, 16), (8, 8, 8)))
    for t in (heavy, light):
        t.info["pattern"] = "out-elementwise-fusable"
    untuned, db = {heavy.key: 4e-3, light.key: 1e-3}, MemoryDatabase()
    tune_model_tasks(FakeSession(untuned), [heavy, light], db, 1)  # the baselines: one trial per task
    assert db.claim(heavy.key, "other", 60, n_trials=4)  # another worker's round of 4 on the heaviest task
    released, seen_first = [], []

    def other_round() -> None:  # ends a moment after this worker's round on the light task
        end = time.monotonic() + 20
        while db.n_measured(light.key) < 1 + 4 and time.monotonic() < end:
            time.sleep(0.01)
        seen_first.append(db.n_measured(light.key) == 1 + 4)
        time.sleep(0.5)  # this worker must wait now: the budget's rest is the other's round
        db.commit([TuningRecord(heavy.key, heavy.target_json, {"i": i}, ["other", i], [], Status.OK, [3e-3], None,
                                "x", TVM_VERSION, version) for i in range(4)])
        released.append(time.monotonic())
        db.release(heavy.key, "other")

    thread = threading.Thread(target=other_round)
    thread.start()
    result = tune_model_tasks(FakeSession(untuned), [heavy, light], db, 5)  # 10 in all: 2 + 4 (other's) + 4
    ended = time.monotonic()
    thread.join()
    assert [r.decisions[0] for r in db.records(heavy.key)] == ["unscheduled"] + ["other"] * 4  # never touched it
    assert result.n_new == 4 and db.n_measured(light.key) == 1 + 4  # the budget's rest, not the other's 4 too
    assert seen_first == [True]  # this worker took the light task while the other held the heavy one
    assert sum(s.n_trials for s in result.states) == 10 and ended >= released[0]  # stopped once the round was in
    assert db.claims() == []


def _tune_together(url: str, log_dir: Path) -> list[dict]:
    """The same command in three processes at once; each one's result event."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "autosched.cli", "tune", "zoo:tiny_mlp", "--trials", str(TRIALS), "--batch",
            str(BATCH), "--threads", "1", "--cost-model", "none", "--json", "--db", url]
    procs = [subprocess.Popen(argv[:3] + ["--log", str(log_dir / f"w{i}.log")] + argv[3:], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(N_WORKERS)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    events = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
    return [e for e in events if e["event"] == "result"]


def _check_together(url: str, results: list[dict]) -> None:
    db = open_database(url, create=False)
    tasks = db.tasks()
    assert len(tasks) == results[0]["tasks"] == 2
    n_measured = 0
    for task in tasks:
        recs = db.records(task.task_key)
        built = [r for r in recs if r.status is not Status.INVALID]
        n_measured += len(built)
        assert sum(r.decisions == BASELINE_DECISIONS for r in recs) == 1  # one worker measured the baseline
        keys = [schedule_key(r.decisions) for r in built]
        assert len(keys) == len(set(keys)), f"{task.name}: a schedule was measured twice"
        assert any(r.status is Status.OK and r.decisions != BASELINE_DECISIONS for r in recs), f"{task.name}: untuned"
        # no two workers on the task at once: trials asked by different processes never overlap in time
        study = load_task_study(db.optuna_storage(), task.task_key)
        trials = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(OWNER_ATTR)]
        assert trials and all(t.state.is_finished() for t in trials)
        for a, b in itertools.combinations(trials, 2):
            if a.user_attrs[OWNER_ATTR] != b.user_attrs[OWNER_ATTR]:
                assert a.datetime_complete <= b.datetime_start or b.datetime_complete <= a.datetime_start, (
                    f"{task.name}: trials {a.number} and {b.number} of two workers overlap")
    assert db.claims() == []  # every claim released at the end
    db.close()
    # nothing lost: each worker's new measurements add up to the records (less the baselines, not counted)
    assert sum(r["new_measurements"] for r in results) == n_measured - len(tasks)
    # the budget is the database's: what one worker would spend, give or take the rounding of a round
    budget = TRIALS * len(tasks)
    assert budget <= n_measured <= budget + (N_WORKERS - 1) * BATCH


@pytest.mark.slow
def test_a_baseline_another_worker_stored_is_not_waited_for_while_it_keeps_the_task(cpu_target):
    """The other worker measured the task's baseline and then tunes it in back-to-back rounds (release, re-claim a
    moment later): this worker takes the stored baseline at once instead of waiting for a gap between rounds."""
    from autosched.scheduler.model_tuning import measure_baselines, measured_baseline
    from autosched.tune import NO_DEADLINE

    task = op_task("matmul", (16, 16, 16), cpu_target, settings_for(cpu_target).version)
    db, stop = MemoryDatabase(), threading.Event()
    assert db.claim(task.key, "other", 60, 0)

    def rounds():
        stop.wait(0.1)  # this worker has looked for stored baselines by now: none yet
        measured_baseline(FakeSession({task.key: 1e-3}), task, db)
        end = time.monotonic() + 5  # a worker without the fix would wait all these 5 s
        while not stop.wait(0.2) and time.monotonic() < end:
            db.release(task.key, "other")
            assert db.claim(task.key, "other", 60, 8)
        db.release(task.key, "other")

    other = threading.Thread(target=rounds)
    other.start()
    try:
        start = time.monotonic()
        (state,) = measure_baselines(FakeSession({task.key: 1e-3}), [task], db, NO_DEADLINE, lambda s: None)
        assert time.monotonic() - start < 2.0 and state.untuned_s == pytest.approx(1e-3)
    finally:
        stop.set()
        other.join()


@pytest.mark.long
def test_three_workers_tune_one_model_on_one_sqlite_file(tmp_path):
    url = str(tmp_path / "shared.db")  # not there yet: the workers race to create it
    _check_together(url, _tune_together(url, tmp_path))


@pytest.mark.slow
def test_three_workers_tune_one_model_on_one_postgresql_database(postgres_url, tmp_path):
    """Needs AUTOSCHED_TEST_POSTGRES_URL (a server this test may create and drop a database on)."""
    _check_together(postgres_url, _tune_together(postgres_url, tmp_path))
