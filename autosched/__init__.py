"""autosched: a search-based auto-scheduler and autotuner for deep-learning models, on TVM and Optuna."""

from __future__ import annotations

from autosched.api import (  # noqa: E402  (imports TVM, with its fixes)
    best_module,
    compile,
    extract_model_tasks,
    load,
    load_compiled,
    load_kernel,
    load_model,
    tune_model,
    tune_operator,
)
from autosched.config import TuneConfig  # noqa: E402
from autosched.db import Database, MemoryDatabase, SQLDatabase, open_database  # noqa: E402
from autosched.deploy.compare import Comparison, compare, peer_calls  # noqa: E402
from autosched.errors import AutoschedError, InvalidConfig, UserInputError  # noqa: E402
from autosched.programs import compile_program, tune  # noqa: E402  (any tensor program; shadows the tune module)
from autosched.records import Candidate, MeasureResult, Status, TuningRecord  # noqa: E402
from autosched.tasks import Task, make_target, op_task, primfunc_task  # noqa: E402
from autosched.torch_backend import backend  # noqa: E402  (torch.compile(model, backend=autosched.backend()))
from autosched.tune import TuneProgress, TuneResult, tune_task  # noqa: E402
from autosched.version import __version__

__all__ = [
    "AutoschedError", "Candidate", "Comparison", "Database", "InvalidConfig", "MeasureResult", "MemoryDatabase",
    "SQLDatabase", "Status", "Task", "TuneConfig", "TuneProgress", "TuneResult", "TuningRecord", "UserInputError",
    "__version__", "backend", "best_module", "compare", "compile", "compile_program", "extract_model_tasks", "load",
    "load_compiled", "load_kernel", "load_model", "make_target", "op_task", "open_database", "peer_calls",
    "primfunc_task", "tune", "tune_model", "tune_operator", "tune_task",
]
