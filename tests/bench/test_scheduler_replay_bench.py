"""bench/scheduler_replay.py: curves read from a real tuning database, and the replay of the task scheduler."""

from __future__ import annotations

import math

from autosched.db import TaskRow, open_database
from autosched.measure.base import TaskIO
from autosched.search.optuna_strategy import OptunaStrategy
from autosched.testing.fakes import NullBuilder, NullRunner
from autosched.tune import tune_task


def test_a_databases_curve_is_each_tasks_best_so_far_in_measured_order(load_bench, tmp_path, matmul_task,
                                                                       matmul_space):
    path = tmp_path / "run.db"
    db = open_database(str(path))
    db.commit_task(TaskRow(matmul_task.key, matmul_task.name, matmul_task.target_json, matmul_task.space_version,
                           "{}", matmul_task.flops, {"weight": 1}))
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "random", 0)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), n_trials=12, batch_size=4)
    latencies = [r.latency_s for r in sorted(db.records(matmul_task.key), key=lambda r: r.created_at)]
    db.close()
    curves = load_bench("scheduler_replay").task_curves(str(path))
    curve = curves[matmul_task.name]["best_s"]
    assert len(curve) == len(latencies) == 12
    assert curve == [float(f"{min(latencies[:i + 1]):.4g}") for i in range(12)]
    assert curves[matmul_task.name]["weight"] == 1


def test_replay_credits_trials_past_a_curves_end_only_with_what_the_longest_run_found(load_bench):
    replay = load_bench("scheduler_replay").replay
    short = {"t": {"weight": 1, "flops": 1e6, "info": {}, "best_s": [4e-3, 2e-3]}}
    longest = {"t": [5e-3, 3e-3, 2e-3, 1.5e-3, 1e-3]}  # reached 2 ms at its third trial, then 1.5 and 1 ms
    assert replay(short, longest, budget=1, stale_decay=0.75, cheap_share=0.0, round_trials=8) == 2e-3
    assert replay(short, longest, budget=2, stale_decay=0.75, cheap_share=0.0, round_trials=8) == 1.5e-3
    assert replay(short, longest, budget=50, stale_decay=0.75, cheap_share=0.0, round_trials=8) == 1e-3
    never = {"t": [5e-3, 3e-3]}  # never as good as the short run's end: nothing more
    assert replay(short, never, budget=50, stale_decay=0.75, cheap_share=0.0, round_trials=8) == 2e-3


def test_replay_runs_the_schedulers_rule_a_heavy_task_stalling_then_improving(load_bench):
    """One heavy task stalls for four rounds then improves; with a steep decay it is left before it does."""
    replay = load_bench("scheduler_replay").replay
    heavy = [4e-3] + [2.4e-3] * 40 + [2.4e-3 * 0.8 ** (i // 8 + 1) for i in range(200)]  # a cut a round of 8
    light = [1e-3 * 0.97 ** (i // 8) for i in range(300)]
    tasks = {"heavy": {"weight": 1, "flops": 1e6, "info": {}, "best_s": heavy},
             "light": {"weight": 4, "flops": 1e6, "info": {}, "best_s": light}}
    longest = {name: t["best_s"] for name, t in tasks.items()}
    run = {d: replay(tasks, longest, budget=240, stale_decay=d, cheap_share=0.0, round_trials=8) for d in (0.5, 0.75)}
    assert math.isfinite(run[0.5]) and run[0.75] < 0.9 * run[0.5]
