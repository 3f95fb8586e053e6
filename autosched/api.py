"""The Python API: tune an operator, and load the best tuned kernel from a database for serving."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosched._tvm import IRModule, Target, load_json, tvm
from autosched.apply import schedule_from_record
from autosched.config import TuneConfig
from autosched.db import Database, open_database
from autosched.errors import UserInputError
from autosched.spaces.settings import settings_for
from autosched.tasks import make_target, op_task
from autosched.tune import TuneProgress, TuneResult


def tune_operator(op: str, shape: tuple[int, ...], target: str | Target = "llvm",
                  db: str | Database = "tuning_logs/autosched.db", config: TuneConfig | None = None,
                  on_progress: Callable[[TuneProgress], None] | None = None) -> TuneResult:
    """Tune one catalog operator; every measurement lands in ``db`` (re-running resumes)."""
    from autosched.session import TuningSession

    config = config or TuneConfig()
    target = target if isinstance(target, Target) else make_target(target, config.threads)
    task = op_task(op, tuple(shape), target, settings_for(target).version)
    database = open_database(db)
    with TuningSession(config, task.target_json) as session:
        return session.tune(task, database, on_progress)


def best_module(db: str | Database, task_key: str) -> IRModule:
    """The task's PrimFunc with its best stored schedule applied (ready for ``tvm.compile``)."""
    database = open_database(db, create=False)
    row = database.task(task_key)
    if row is None:
        raise UserInputError(f"task {task_key} is not in the database: see `autosched show --db ...`")
    best = database.best(task_key, row.target)
    if best is None:
        raise UserInputError(f"task {row.name} has no valid measurement yet: tune it first")
    return schedule_from_record(load_json(row.workload_json), best).mod


def load_kernel(db: str | Database, task_key: str) -> Any:
    """Compile the best schedule of a task for its target; returns a TVM runtime Module (call ``["main"]``)."""
    database = open_database(db, create=False)
    row = database.task(task_key)
    mod = best_module(database, task_key)
    import json

    return tvm.compile(mod, target=Target(json.loads(row.target))).mod
