"""An in-memory database for unit tests of the loop."""

from __future__ import annotations

import threading
import time
from typing import Any

import optuna

from autosched.db.base import LEASE_S, Claim, Database, Selection, TaskRow
from autosched.masking import mask_secrets
from autosched.records import TuningRecord


class MemoryDatabase(Database):
    def __init__(self) -> None:
        self._tasks: dict[str, TaskRow] = {}
        self._records: list[TuningRecord] = []
        self._storage = optuna.storages.InMemoryStorage()
        self._claims: dict[str, Claim] = {}
        self._claims_lock = threading.Lock()  # workers in threads: claim atomically
        self._selections: dict[str, Selection] = {}

    def commit_task(self, task: TaskRow) -> None:
        self._tasks.setdefault(task.task_key, task)

    def commit(self, records: list[TuningRecord]) -> None:
        for r in records:
            r.record_id = len(self._records) + 1
            r.error = r.error and mask_secrets(r.error)  # as the SQL database stores it
            self._records.append(r)

    def records(self, task_key: str | None = None) -> list[TuningRecord]:
        return [r for r in self._records if task_key is None or r.task_key == task_key]

    def select(self, selections: list[Selection]) -> None:
        self._selections.update({s.task_key: s for s in selections})

    def selection(self, task_key: str) -> Selection | None:
        return self._selections.get(task_key)

    def tasks(self) -> list[TaskRow]:
        return list(self._tasks.values())

    def optuna_storage(self) -> Any:
        return self._storage

    def claim(self, task_key: str, worker_id: str, lease_s: float = LEASE_S, n_trials: int = 0) -> bool:
        with self._claims_lock:
            now, held = time.time(), self._claims.get(task_key)
            if held is not None and held.worker_id != worker_id and held.expires_at >= now:
                return False
            self._claims[task_key] = Claim(task_key, worker_id, now + lease_s, n_trials)
            return True

    def renew(self, task_key: str, worker_id: str, lease_s: float = LEASE_S) -> bool:
        with self._claims_lock:
            held = self._claims.get(task_key)
            if held is None or held.worker_id != worker_id:
                return False
            self._claims[task_key] = Claim(task_key, worker_id, time.time() + lease_s, held.n_trials)
            return True

    def release(self, task_key: str, worker_id: str) -> None:
        with self._claims_lock:
            if task_key in self._claims and self._claims[task_key].worker_id == worker_id:
                del self._claims[task_key]

    def claims(self) -> list[Claim]:
        with self._claims_lock:
            now = time.time()
            return [c for c in self._claims.values() if c.expires_at >= now]
