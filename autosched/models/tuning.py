"""Tune a whole model: its tasks share one trial budget through the task scheduler."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from autosched._tvm import save_json
from autosched.db import Database, TaskRow
from autosched.models.scheduler import TaskScheduler, TaskState
from autosched.records import Status, TuningRecord
from autosched.tasks import Task
from autosched.tune import BASELINE_DECISIONS, baseline_record, eta_s


@dataclass
class ModelProgress:
    n_done: int
    n_total: int
    estimated_s: float  # sum of weight x best latency over the tasks, now
    untuned_s: float  # the same sum for the default builds
    task_name: str
    elapsed_s: float
    n_done_at_start: int = 0

    @property
    def eta_s(self) -> float:
        return eta_s(self.elapsed_s, self.n_done - self.n_done_at_start, self.n_total - self.n_done)


@dataclass
class ModelTuneResult:
    states: list[TaskState]
    elapsed_s: float
    n_new: int

    @property
    def untuned_s(self) -> float:
        return sum(s.task.weight * s.untuned_s for s in self.states if s.untuned_s < float("inf"))

    @property
    def estimated_s(self) -> float:
        return sum(s.contribution_s for s in self.states)


def measured_baseline(session, task: Task, db: Database) -> TuningRecord:
    """The task's default build, measured once and kept in the database as a record (so a tuned model never
    uses a schedule slower than no schedule, and a resumed run does not measure it again)."""
    for rec in db.records(task.key):
        if rec.decisions == BASELINE_DECISIONS:
            return rec
    db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, save_json(task.mod),
                           task.flops, task.info))
    rec = baseline_record(task, session.measure_unscheduled(task))
    db.commit([rec])
    return rec


def share_sibling_bests(task: Task, strategies: dict, tasks: dict[str, Task], db: Database) -> None:
    """Tasks with the same search space (one convolution with different epilogues, say) try each other's
    best schedule: queued before the task's next round (a no-op once it is queued or measured)."""
    own = strategies[task.key]
    for key, other in strategies.items():
        if key == task.key or other.space_signature != own.space_signature:
            continue
        best = db.best(key, tasks[key].target_json)
        if best is not None and best.trace_json is not None:  # not a baseline record
            own.propose(best.params)


def tune_model_tasks(session, tasks: list[Task], db: Database, trials_per_task: int,
                     on_progress: Callable[[ModelProgress], None] | None = None) -> ModelTuneResult:
    """Give the model ``trials_per_task x len(tasks)`` measurements in all (earlier runs included)."""
    start = time.perf_counter()
    states = []
    for i, task in enumerate(tasks):
        if on_progress:
            on_progress(ModelProgress(0, trials_per_task * len(tasks), float("nan"), float("nan"),
                                      f"untuned build {i + 1}/{len(tasks)}: {task.name}", time.perf_counter() - start))
        base = measured_baseline(session, task, db)
        best = db.best(task.key, task.target_json)
        states.append(TaskState(task, base.latency_s if base.status is Status.OK else float("inf"),
                                best.latency_s if best else float("inf"), db.n_measured(task.key)))
    scheduler = TaskScheduler(states, trials_per_task * len(tasks), session.config.batch_size)
    done_at_start = scheduler.trials_done
    untuned = scheduler.estimated_latency_s
    strategies: dict[str, object] = {}
    by_key = {s.task.key: s.task for s in states}

    def report(name: str) -> None:
        if on_progress:
            on_progress(ModelProgress(scheduler.trials_done, scheduler.total_trials, scheduler.estimated_latency_s,
                                      untuned, name, time.perf_counter() - start, done_at_start))

    report("")
    while (state := scheduler.next_task()) is not None:
        task = state.task
        if task.key not in strategies:
            strategies[task.key] = session.strategy(task, db)
        share_sibling_bests(task, strategies, by_key, db)
        want = state.n_trials + scheduler.round_size(state)

        def on_task_progress(p, state=state) -> None:
            state.n_trials, state.best_s = p.n_done, min(state.best_s, p.best_latency_s)
            report(state.task.name)

        result = session.tune(task, db, on_task_progress, strategies[task.key], n_trials=want)
        scheduler.update(state, result.n_measured, result.best_latency_s, exhausted=result.n_measured < want)
        report(task.name)
    return ModelTuneResult(states, time.perf_counter() - start, scheduler.trials_done - done_at_start)
