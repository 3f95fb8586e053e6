"""The tuning database interface: tasks, records, and the Optuna storage that lives beside them."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autosched.db.leases import LEASE_S, Claim, Leases
from autosched.records import Status, TuningRecord, schedule_key

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


@dataclass
class Selection:
    """A task's schedule as chosen by timing the whole model (``deploy/in_model.py``): ``compile`` applies it
    before the fastest record measured alone."""

    task_key: str
    target: str  # target JSON (the records' own)
    record_id: int
    model: str  # the model it was chosen in
    in_model_s: float | None  # the kernel's seconds per inference inside that model (all its calls; None: not timed
    # there, a light task)
    model_s: float  # the model's latency with the combination this choice belongs to
    created_at: float = field(default_factory=time.time)


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

    @abc.abstractmethod
    def claim(self, task_key: str, worker_id: str, lease_s: float = LEASE_S, n_trials: int = 0) -> bool:
        """Take (or renew) the task for ``lease_s`` seconds unless another worker's claim on it is live; atomic:
        of workers claiming at once, one wins."""

    @abc.abstractmethod
    def renew(self, task_key: str, worker_id: str, lease_s: float = LEASE_S) -> bool:
        """Extend the worker's claim by ``lease_s`` from now; False if it holds none (released, or expired and
        taken over)."""

    @abc.abstractmethod
    def release(self, task_key: str, worker_id: str) -> None:
        """End the worker's claim on the task (no-op if it holds none)."""

    @abc.abstractmethod
    def claims(self) -> list[Claim]:
        """The live (unexpired) claims."""

    def commit_all(self, tasks: list[TaskRow], records: list[TuningRecord], selections: list[dict]) -> None:
        """Store new tasks, records and an export's selections (``matched_selections``) in one transaction: all or
        nothing (an import)."""
        for t in tasks:
            self.commit_task(t)
        self.commit(records)
        chosen = matched_selections(selections, self.records)
        if chosen:
            self.select(chosen)

    def select(self, selections: list[Selection]) -> None:
        """Store schedules chosen inside a model, each replacing the task's earlier choice; atomic."""
        raise NotImplementedError(f"{type(self).__name__} keeps no in-model selections")

    def selection(self, task_key: str) -> Selection | None:
        """The task's schedule as chosen inside a model, if one was (None: compile takes its best record)."""
        return None

    def leases(self) -> Leases:
        """This process's claims on the database: one holder (worker id, heartbeat) per Database object."""
        if "_leases" not in self.__dict__:
            self.__dict__["_leases"] = Leases(self)
        return self.__dict__["_leases"]

    def close(self) -> None:
        """Release connections (and this process's claims)."""
        if "_leases" in self.__dict__:
            self.__dict__["_leases"].close()

    @property
    def display_name(self) -> str:
        """How the database is named in output (a URL without its password)."""
        return type(self).__name__

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- concrete helpers on top of the interface ---------------------------------------------------------
    def task(self, task_key: str) -> TaskRow | None:
        return next((t for t in self.tasks() if t.task_key == task_key), None)

    def best(self, task_key: str, target: str | None = None) -> TuningRecord | None:
        """The fastest valid record of a task (optionally for one exact target)."""
        ok = [r for r in self.records(task_key)
              if r.status is Status.OK and r.latencies_s and (target is None or r.target == target)]
        return min(ok, key=lambda r: r.latency_s, default=None)

    def selected(self, task_key: str, target: str | None = None) -> TuningRecord | None:
        """The record a model's end-to-end phase chose for the task (``select``), if it is still there."""
        chosen = self.selection(task_key)
        if chosen is None or (target is not None and chosen.target != target):
            return None
        return next((r for r in self.records(task_key) if r.record_id == chosen.record_id), None)

    def n_measured(self, task_key: str) -> int:
        """Candidates that were built and run (whatever the outcome); rejected-before-build ones do not count."""
        return sum(r.status is not Status.INVALID for r in self.records(task_key))


def matched_selections(selections: list[dict], records_of: Callable[[str], list[TuningRecord]]) -> list[Selection]:
    """An export's in-model choices, each pointed at the record it names (by creation time and decisions) among
    ``records_of(task_key)``; those whose record is missing are dropped."""
    chosen = []
    for sel in selections:
        named = (sel["record_created_at"], schedule_key(sel["record_decisions"]))
        rec = next((r for r in records_of(sel["task_key"]) if (r.created_at, schedule_key(r.decisions)) == named),
                   None)
        if rec is not None:
            fields = {k: sel[k] for k in ("task_key", "target", "model", "in_model_s", "model_s", "created_at")}
            chosen.append(Selection(**fields, record_id=rec.record_id))
    return chosen


def display_name(path_or_url: str | Database) -> str:
    """The database as autosched prints it: a path as given, a URL without its password."""
    if isinstance(path_or_url, Database):
        return path_or_url.display_name
    from autosched.masking import mask_secrets

    return mask_secrets(path_or_url)

