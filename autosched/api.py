"""The Python API: tune an operator, and load the best tuned kernel from a database for serving."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosched._tvm import IRModule, Target, load_json, tvm
from autosched.apply import schedule_from_record
from autosched.config import TuneConfig
from autosched.db import Database, open_database
from autosched.errors import UserInputError
from autosched.native_log import quiet_api
from autosched.spaces.settings import settings_for
from autosched.tasks import make_target, op_task
from autosched.tune import TuneProgress, TuneResult


@quiet_api
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


@quiet_api
def load_kernel(db: str | Database, task_key: str) -> Any:
    """Compile the best schedule of a task for its target; returns a TVM runtime Module (call ``["main"]``)."""
    database = open_database(db, create=False)
    row = database.task(task_key)
    mod = best_module(database, task_key)
    import json

    return tvm.compile(mod, target=Target(json.loads(row.target))).mod


# --- whole models ----------------------------------------------------------------------------------------
@quiet_api
def load_model(source: Any, inputs: dict[str, tuple[int, ...]] | None = None, example_inputs: tuple | None = None,
               name: str | None = None):
    """An ONNX path or ModelProto, a ``torch.nn.Module`` (with ``example_inputs``), a Relax IRModule,
    ``"zoo:NAME"`` (a built-in model) or ``"corpus:NAME"`` / ``"corpus:NAME@small"`` (a model of the corpus,
    ``autosched.models.corpus``, full size unless ``@small``); built-in and corpus models are exported to ONNX
    and imported from that file, as a user's would be."""
    from autosched.models.frontends import load_model as _load

    if isinstance(source, str) and source.startswith(("zoo:", "corpus:")):
        import tempfile

        from autosched.models import corpus, zoo

        kind, _, spec = source.partition(":")
        with tempfile.TemporaryDirectory(prefix=f"autosched-{kind}-") as tmp:
            if kind == "zoo":
                path = zoo.export_onnx(spec, f"{tmp}/{spec}.onnx")
            else:
                model_name, _, size = spec.partition("@")
                path = corpus.export_onnx(model_name, f"{tmp}/{model_name}.onnx", size=size or "full")
            return _load(path, inputs, name=name or spec)
    return _load(source, inputs, example_inputs, name)


@quiet_api
def extract_model_tasks(model: Any, target: str | Target = "llvm", n_threads: int | None = None,
                        shape_buckets: dict[str, tuple[int, ...]] | None = None, precision: str = "fp32"):
    """The graph rewrites, then one task per distinct fusion group (what ``tune_model`` tunes). With
    ``shape_buckets`` (``{"seq": (16, 32, 64)}``, an ONNX model with symbolic dimensions): every bucket's tasks,
    those structurally identical across buckets merged. ``precision``: ``bf16``/``fp16`` matmuls and convolutions
    (``autosched.models.precision``)."""
    from autosched.models.graph import extract_tasks, rewrite

    target = target if isinstance(target, Target) else make_target(target, n_threads)
    version = settings_for(target).version
    if shape_buckets:
        from autosched.models.buckets import load_buckets, merge_bucket_tasks

        _, models = load_buckets(model, shape_buckets)
        return merge_bucket_tasks([(sizes, extract_tasks(rewrite(_at(m, precision).mod, target), target, version))
                                   for sizes, m in models])
    model = _at(model if hasattr(model, "mod") else load_model(model), precision)
    return extract_tasks(rewrite(model.mod, target), target, version)


def _at(model: Any, precision: str) -> Any:
    """``model`` marked for the ``precision`` rewrite (in place; fp32 leaves it as it is)."""
    from autosched.models.precision import with_precision

    if precision != "fp32":
        model.mod = with_precision(model.mod, precision)
    return model


@quiet_api
def tune_model(model: Any, target: str | Target = "llvm", db: str | Database = "tuning_logs/autosched.db",
               config: TuneConfig | None = None, on_progress: Callable | None = None,
               shape_buckets: dict[str, tuple[int, ...]] | None = None, precision: str = "fp32"):
    """Tune every fusion group of a model; ``config.n_trials`` per task on average, shared by the scheduler,
    and at most ``config.time_budget_s`` seconds from this call on (when set; ``n_trials=0`` then lifts the
    trial limit). ``shape_buckets``: the sizes of a model's symbolic dimensions to tune for (every bucket's
    tasks in one run); ``precision``: ``bf16``/``fp16`` matmuls and convolutions (compile with the same).
    Returns a ``ModelTuneResult`` (per-task states; ``n_tasks``, ``n_tuned``, ``n_default``)."""
    from autosched.models.tuning import tune_model_tasks
    from autosched.session import TuningSession
    from autosched.tune import Deadline

    config = (config or TuneConfig()).for_model()
    deadline = Deadline.after(config.time_budget_s)
    target = target if isinstance(target, Target) else make_target(target, config.threads)
    tasks = extract_model_tasks(model, target, shape_buckets=shape_buckets, precision=precision)
    database = open_database(db)
    with TuningSession(config, tasks[0].target_json) as session:
        return tune_model_tasks(session, tasks, database, config.n_trials, on_progress, deadline)


@quiet_api
def compile(model: Any, target: str | Target = "llvm", db: str | Database | None = None,
            n_threads: int | None = None, shape_buckets: dict[str, tuple[int, ...]] | None = None,
            precision: str = "fp32", max_padding: float | None = None, cuda_graph: bool = False):
    """Build a model with the best schedule of every tuned fusion group in ``db`` (default ones elsewhere).

    Returns a ``CompiledModel``: call it with numpy arrays, ``.time(...)`` it, or ``.export_library(path)``
    and load that later with ``autosched.load_compiled(path)``. With ``shape_buckets`` (an ONNX model with
    symbolic dimensions): a ``BucketedModel`` that takes inputs of any size (``autosched.models.buckets``);
    ``max_padding`` (e.g. 1.25) adds builds between the buckets with their schedules refitted, so that no size
    pads by more (``compile_buckets``).
    ``precision``: ``bf16``/``fp16`` matmuls and convolutions, as tuned; ``.precision_error`` is the max relative
    error against float32 on random inputs. ``cuda_graph`` (a CUDA target, fixed shapes): the kernel launches
    are captured once as CUDA graphs and replayed.
    """
    from autosched.models.build import compile_model

    target = target if isinstance(target, Target) else make_target(target, n_threads)
    database = open_database(db, create=False) if db is not None else None
    if shape_buckets:
        from autosched.models.buckets import compile_buckets, load_buckets

        symbolic, models = load_buckets(model, shape_buckets)
        return compile_buckets(symbolic, [(sizes, _at(m, precision)) for sizes, m in models], target, database,
                               lambda sizes: _at(load_model(model, symbolic.shapes(sizes)), precision),
                               max_padding=max_padding)
    model = _at(model if hasattr(model, "mod") else load_model(model), precision)
    return compile_model(model, target, database, cuda_graph=cuda_graph)


def load_compiled(path: str):
    """A model library written by ``CompiledModel.export_library`` or ``autosched compile -o``."""
    from autosched.models.build import load_compiled as _load

    return _load(path)
