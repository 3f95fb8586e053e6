"""An in-memory database for unit tests of the loop."""

from __future__ import annotations

from typing import Any

import optuna

from autosched.db.base import Database, TaskRow
from autosched.records import TuningRecord


class MemoryDatabase(Database):
    def __init__(self) -> None:
        self._tasks: dict[str, TaskRow] = {}
        self._records: list[TuningRecord] = []
        self._storage = optuna.storages.InMemoryStorage()

    def commit_task(self, task: TaskRow) -> None:
        self._tasks.setdefault(task.task_key, task)

    def commit(self, records: list[TuningRecord]) -> None:
        for r in records:
            r.record_id = len(self._records) + 1
            self._records.append(r)

    def records(self, task_key: str | None = None) -> list[TuningRecord]:
        return [r for r in self._records if task_key is None or r.task_key == task_key]

    def tasks(self) -> list[TaskRow]:
        return list(self._tasks.values())

    def optuna_storage(self) -> Any:
        return self._storage
