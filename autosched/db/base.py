"""The tuning database interface: tasks, records, and the Optuna storage that lives beside them."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from autosched.records import Status, TuningRecord

SCHEMA_VERSION = 2  # v2 (autosched 0.2): records.predicted_score


@dataclass
class TaskRow:
    task_key: str
    name: str
    target: str
    space_version: int
    workload_json: str  # tvm.ir.save_json of the task's IRModule
    flops: float
    info: dict[str, Any]


class Database(abc.ABC):
    @abc.abstractmethod
    def commit_task(self, task: TaskRow) -> None:
        """Store a task (no-op if its key is already there)."""

    @abc.abstractmethod
    def commit(self, records: list[TuningRecord]) -> None:
        """Append records atomically: all of them or none."""

    @abc.abstractmethod
    def records(self, task_key: str | None = None) -> list[TuningRecord]: ...

    @abc.abstractmethod
    def tasks(self) -> list[TaskRow]: ...

    @abc.abstractmethod
    def optuna_storage(self) -> Any:
        """Where Optuna keeps its studies (the same database, so runs resume)."""

    def close(self) -> None:
        """Release connections."""

    # --- concrete helpers on top of the interface ---------------------------------------------------------
    def task(self, task_key: str) -> TaskRow | None:
        return next((t for t in self.tasks() if t.task_key == task_key), None)

    def best(self, task_key: str, target: str | None = None) -> TuningRecord | None:
        """The fastest valid record of a task (optionally for one exact target)."""
        ok = [r for r in self.records(task_key)
              if r.status is Status.OK and r.latencies_s and (target is None or r.target == target)]
        return min(ok, key=lambda r: r.latency_s, default=None)

    def n_measured(self, task_key: str) -> int:
        """Candidates that were built and run (whatever the outcome); rejected-before-build ones do not count."""
        return sum(r.status is not Status.INVALID for r in self.records(task_key))
