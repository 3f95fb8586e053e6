"""The Python API and the one pipeline behind every command: config -> target -> tasks -> database -> session.

Each step is a function the command line calls too, so that both refuse the same bad input with the same line,
and all of it before a database is opened or a file written:

- ``checked_config``: the config's names (sampler, cost model) and budget, and a reachable RPC tracker;
- ``tuning_target``: the target, built once (a string or a ``Target``) and checked to run here or on RPC devices;
- ``operator_task`` / ``plan_model``: the task(s) to tune, with their model (import, precision, graph rewrites);
- ``tuning_database``: the database, opened for tuning (its records' TVM release checked against this one);
- ``tune_planned_task`` / ``tune_planned_model``: the session that measures, until the trial or time budget ends.

``tune_operator`` and ``tune_model`` chain them; ``compile`` builds a model with the best schedules of a database.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autosched._tvm import IRModule, Target, load_json, tvm
from autosched.apply import schedule_from_record
from autosched.config import COST_MODELS, DEFAULT_DATABASE, TuneConfig
from autosched.db import Database, open_database
from autosched.errors import UnknownNameError, UserInputError
from autosched.native_log import quiet_api
from autosched.parts import NO_PARTS, Parts, parts_of
from autosched.records import MeasureResult
from autosched.spaces.settings import settings_for
from autosched.targets import check_measurable, copy_bandwidth_for  # noqa: F401  (copy_bandwidth_for: for the CLI)
from autosched.tasks import Task, make_target, op_task
from autosched.tune import Deadline, TuneProgress, TuneResult

log = logging.getLogger("autosched.api")

OnStep = Callable[[str], contextlib.AbstractContextManager]  # a step's description -> a context shown while it runs
OnNote = Callable[[str], None]  # something the user should know (a rewrite the model went without, ...)


def _no_step(description: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def _log_note(text: str) -> None:
    log.warning("%s", text)


# --- config, target, database ------------------------------------------------------------------------------
def checked_config(config: TuneConfig | None = None) -> TuneConfig:
    """``config`` (default: ``TuneConfig()``) once its names and budget are known to be usable: a sampler and a
    cost model autosched has, at least one trial per task unless a time budget decides (``n_trials=0``), and an
    RPC tracker that answers with devices under its key. Else a one-line ``UserInputError``."""
    from autosched.search.optuna_strategy import SAMPLERS

    config = config or TuneConfig()
    if config.sampler not in SAMPLERS:
        raise UnknownNameError("sampler", config.sampler, list(SAMPLERS))
    if config.cost_model not in COST_MODELS:
        raise UnknownNameError("cost model", config.cost_model, list(COST_MODELS))
    if config.n_trials < 1 and not config.time_budget_s:
        raise UserInputError("config: n_trials must be at least 1 (0, no trial limit, goes with a time budget)")
    if config.rpc:  # an unreachable tracker or a key without devices: refused before the database opens
        from autosched.measure.rpc import check_tracker

        check_tracker(config.tracker, config.rpc_key)
    return config


def tuning_target(target: str | Target, config: TuneConfig) -> Target:
    """The target to tune for, built once: ``target`` (a string, at ``config.threads`` threads, or a ``Target``),
    checked to run here or, with ``config.rpc``, on the tracker's devices; with the XGBoost screen, its shipped
    start model checked to load."""
    built = target if isinstance(target, Target) else make_target(target, config.threads)
    check_measurable(built, remote=bool(config.rpc))
    if config.cost_model == "xgb" and config.transfer:
        from autosched.session import load_start_model

        load_start_model(config.transfer_model, built.kind.name)  # a bad model is refused before the db opens
    return built


def build_target(target: str | Target, n_threads: int | None = None) -> Target:
    """A target to build for (compile: another CPU's build is fine, it is not run here); ``n_threads``: None or 0
    for all cores."""
    if n_threads is not None and n_threads < 0:
        raise UserInputError(f"n_threads must be at least 1 (or 0 for all cores), got {n_threads}")
    return target if isinstance(target, Target) else make_target(target, n_threads)


@contextlib.contextmanager
def opened(db: str | Database, create: bool = True, read_only: bool = False) -> Iterator[Database]:
    """The database ``db`` names, closed on exit; a ``Database`` given is the caller's, left open. ``read_only``
    (compile, run, load_kernel: they only read records): an existing database, never written or migrated."""
    if isinstance(db, Database):
        yield db
        return
    with open_database(db, create=create, read_only=read_only) as database:
        yield database


@contextlib.contextmanager
def tuning_database(db: str | Database, tasks: list[Task]) -> Iterator[Database]:
    """The database to tune ``tasks`` into (created if need be), refused where it holds their records of
    another TVM release (resuming would mix them with new measurements)."""
    from autosched.session import check_tvm_version

    with opened(db) as database:
        for task in tasks:
            check_tvm_version(database, task)  # before anything is measured or written
        yield database


# --- one operator or tensor program ---------------------------------------------------------------------------
@dataclass
class TaskPlan:
    """One task to tune, with the config and deadline it is tuned under (the clock runs from the plan)."""

    task: Task
    config: TuneConfig
    deadline: Deadline

    @classmethod
    def of(cls, task: Task, config: TuneConfig) -> TaskPlan:
        return cls(task, config, Deadline.after(config.time_budget_s))


def operator_task(op: str, shape: tuple[int, ...] | str, target: Target) -> Task:
    """A catalog operator at ``shape`` (a tuple or ``"512,512,512"``), its sizes checked."""
    from autosched.workloads import get_workload, parse_shape

    workload = get_workload(op)
    shape = parse_shape(shape) if isinstance(shape, str) else tuple(shape)
    workload.normalise(shape)
    return op_task(op, shape, target, settings_for(target).version)


def plan_operator(op: str, shape: tuple[int, ...] | str, target: str | Target = "llvm",
                  config: TuneConfig | None = None) -> TaskPlan:
    config = checked_config(config)
    return TaskPlan.of(operator_task(op, shape, tuning_target(target, config)), config)


def tune_planned_task(plan: TaskPlan, db: str | Database = DEFAULT_DATABASE,
                      on_progress: Callable[[TuneProgress], None] | None = None, baseline: bool = False,
                      on_start: Callable[[int], None] | None = None,
                      parts: Parts = NO_PARTS) -> tuple[TuneResult, MeasureResult | None]:
    """Tune the planned task into ``db`` until ``config.n_trials`` measurements (earlier runs included) or the
    time budget ends; ``baseline``: also measure its untuned build first. ``on_start`` gets the number of trials
    already in the database. ``parts``: the user's sampler, runner, builder, cost model and callbacks
    (``autosched/parts.py``). Returns (the result, the untuned measurement or None)."""
    from autosched.session import TuningSession

    with tuning_database(db, [plan.task]) as database, \
            TuningSession(plan.config, plan.task.target, parts=parts) as session:
        untuned = session.measure_unscheduled(plan.task) if baseline else None
        if on_start is not None:
            on_start(database.n_measured(plan.task.key))
        result = session.tune(plan.task, database, parts.progress(on_progress), n_trials=plan.config.trial_limit,
                              deadline=plan.deadline)
    return result, untuned


@quiet_api
def tune_operator(op: str, shape: tuple[int, ...], target: str | Target = "llvm",
                  db: str | Database = DEFAULT_DATABASE, config: TuneConfig | None = None,
                  on_progress: Callable[[TuneProgress], None] | None = None, *, sampler: Any = None,
                  runner: Any = None, builder: Any = None, cost_model: Any = None,
                  callbacks: Sequence[Callable] | None = None) -> TuneResult:
    """Tune one catalog operator; every measurement lands in ``db`` (re-running resumes). ``sampler``,
    ``runner``, ``builder``, ``cost_model``, ``callbacks``: names or objects (``autosched/parts.py``)."""
    config, parts = parts_of(config or TuneConfig(), sampler, runner, builder, cost_model, callbacks)
    return tune_planned_task(plan_operator(op, shape, target, config), db, on_progress, parts=parts)[0]


def best_module(db: str | Database, task_key: str) -> IRModule:
    """The task's PrimFunc with its best stored schedule applied (ready for ``tvm.compile``)."""
    with opened(db, read_only=True) as database:
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
    with opened(db, read_only=True) as database:
        row = database.task(task_key)
        mod = best_module(database, task_key)
    return tvm.compile(mod, target=Target(json.loads(row.target))).mod


# --- whole models --------------------------------------------------------------------------------------------
@quiet_api
def load_model(source: Any, inputs: dict[str, tuple[int, ...]] | None = None, example_inputs: tuple | None = None,
               name: str | None = None):
    """An ONNX path or ModelProto, a ``torch.nn.Module`` (with ``example_inputs``), a Relax IRModule,
    ``"zoo:NAME"`` (a built-in model) or ``"corpus:NAME"`` / ``"corpus:NAME@small"`` (a model of the corpus,
    ``autosched.corpus.catalog``, full size unless ``@small``); built-in and corpus models are exported to ONNX
    and imported from that file, as a user's would be."""
    from autosched.graph.frontends import load_model as _load

    if isinstance(source, str) and source.startswith(("zoo:", "corpus:")):
        from autosched.corpus import catalog, zoo
        from autosched.scratch import scratch_dir

        kind, _, spec = source.partition(":")
        with scratch_dir(kind) as tmp:
            if kind == "zoo":
                path = zoo.export_onnx(spec, f"{tmp}/{spec}.onnx")
            else:
                model_name, _, size = spec.partition("@")
                path = catalog.export_onnx(model_name, f"{tmp}/{model_name}.onnx", size=size or "full")
            return _load(path, inputs, name=name or spec)
    return _load(source, inputs, example_inputs, name)


def _with_precision(model: Any, precision: str) -> Any:
    """``model`` marked for the ``precision`` rewrite (in place; fp32 leaves it as it is: a model marked already
    keeps its mark)."""
    from autosched.graph.precision import with_precision

    if precision != "fp32":
        model.mod = with_precision(model.mod, precision)
    return model


def rewritten(model: Any, target: Target, precision: str = "fp32", on_note: OnNote = _log_note,
              on_pass: Callable | None = None) -> Any:
    """The model's fused module after the graph rewrites (``precision`` applied first); each rewrite the model
    had to go without (and each import step it went without) is one note."""
    from autosched.graph.passes import rewrite

    _with_precision(model, precision)
    fallbacks: list = list(model.info.get("fallbacks", []))
    fused = rewrite(model.mod, target, on_pass, fallbacks, model.name)
    for fallback in fallbacks:
        on_note(f"{model.name}: {fallback}")
    return fused


def _loaded(source: Any, inputs: dict[str, tuple[int, ...]] | None, on_step: OnStep) -> Any:
    if hasattr(source, "mod"):  # a Model already
        return source
    with on_step(f"importing {source}"):
        return load_model(source, inputs)


@dataclass
class ModelPlan:
    """A model's tasks to tune, with the config, target and deadline they are tuned under (the clock runs from
    the plan: the budget covers the import and graph rewrites too)."""

    model: Any
    target: Target
    tasks: list[Task]
    n_groups: int  # fusion groups (of every bucket)
    config: TuneConfig
    deadline: Deadline
    buckets: list[dict[str, int]] = field(default_factory=list)  # the shape buckets' sizes, if any
    n_bucket_tasks: int = 0  # tasks of all buckets before the identical ones were merged
    fused: Any = None  # the model's fused module (one shape, no buckets): ``compile(..., fused=)`` reuses it


def plan_model(model: Any, target: str | Target = "llvm", config: TuneConfig | None = None,
               shape_buckets: dict[str, Any] | None = None, precision: str = "fp32",
               inputs: dict[str, tuple[int, ...]] | None = None, on_step: OnStep = _no_step,
               on_note: OnNote = _log_note) -> ModelPlan:
    """Everything a model's tuning needs before a database opens: the config (``for_model``), the target, the
    model imported (``inputs``: shapes of its inputs by name), rewritten and cut into tasks. ``shape_buckets``
    (``{"seq": (16, 32, 64)}``, or the CLI's ``["seq=1..256"]``): an ONNX model with symbolic dimensions, every bucket's
    tasks, the identical ones merged."""
    from autosched.graph.passes import extract_tasks, fusion_groups

    config = checked_config(config).for_model()  # weights timed out of the caches, as in the model
    deadline = Deadline.after(config.time_budget_s)
    target = tuning_target(target, config)
    version = settings_for(target).version
    if shape_buckets:
        from autosched.deploy.buckets import merge_bucket_tasks

        _, loaded = rewritten_buckets(model, target, shape_buckets, precision, inputs, on_step, on_note)
        with on_step(f"task extraction ({len(loaded)} buckets)"):
            per_bucket = [(sizes, extract_tasks(fused, target, version)) for sizes, _, fused in loaded]
        first = loaded[0][1]
        first.name = first.name.split("@")[0]
        return ModelPlan(first, target, merge_bucket_tasks(per_bucket),
                         sum(len(fusion_groups(fused)) for _, _, fused in loaded), config, deadline,
                         [sizes for sizes, _, _ in loaded], sum(len(t) for _, t in per_bucket))
    loaded_model, fused = prepare_model(model, target, precision, inputs, on_step, on_note)
    with on_step(f"{loaded_model.name}: task extraction"):
        tasks = extract_tasks(fused, target, version)
    return ModelPlan(loaded_model, target, tasks, len(fusion_groups(fused)), config, deadline, fused=fused)


def rewritten_buckets(source: Any, target: Target, shape_buckets: dict[str, Any], precision: str = "fp32",
                      inputs: dict[str, tuple[int, ...]] | None = None, on_step: OnStep = _no_step,
                      on_note: OnNote = _log_note) -> tuple[Any, list[tuple[dict[str, int], Any, Any]]]:
    """(symbolic inputs, [(sizes, model, fused module)] one per bucket) of an ONNX model with symbolic
    dimensions; ``shape_buckets`` as ``{"seq": (16, 32)}`` or the CLI's ``["seq=16,32"]`` / ``["seq=1..256"]``."""
    from autosched.deploy.buckets import bucket_label, load_buckets, parse_shape_buckets

    if hasattr(source, "mod"):
        raise UserInputError("--shape-buckets needs an ONNX model with symbolic dimensions, not a --func program")
    buckets = parse_shape_buckets(shape_buckets) if isinstance(shape_buckets, list) else shape_buckets
    with on_step(f"importing {source} at {len(buckets)} symbol(s)' buckets"):
        symbolic, models = load_buckets(source, buckets, inputs)
    loaded = []
    for sizes, model in models:
        with on_step(f"{model.name}: graph rewrites ({bucket_label(sizes)})"):
            loaded.append((sizes, model, rewritten(model, target, precision, on_note)))
    return symbolic, loaded


def tune_planned_model(plan: ModelPlan, db: str | Database = DEFAULT_DATABASE,
                       on_progress: Callable | None = None, parts: Parts = NO_PARTS):
    """Tune the planned model's tasks into ``db``: ``config.n_trials`` per task on average, shared by the task
    scheduler, within the time budget from the plan on (``n_trials=0`` then lifts the trial limit). ``parts``: the
    user's sampler, runner, builder, cost model and callbacks (``autosched/parts.py``)."""
    from autosched.scheduler.model_tuning import tune_model_tasks
    from autosched.session import TuningSession

    on_progress = parts.progress(on_progress)
    with tuning_database(db, plan.tasks) as database, TuningSession(plan.config, plan.target, parts=parts) as session:
        started, (phase_s, n_variants) = time.time(), _in_model_reserve_s(plan)
        search_deadline = plan.deadline
        if phase_s and plan.deadline.limited:
            search_deadline = replace(plan.deadline, at=plan.deadline.at - phase_s)
        result = tune_model_tasks(session, plan.tasks, database, plan.config.n_trials, on_progress, search_deadline)
        if phase_s and result.states:
            result.in_model = _in_model_phase(session, plan, result, database, started, on_progress, n_variants)
        return result


def _in_model_reserve_s(plan: ModelPlan) -> tuple[float, int]:
    """(seconds kept from the search for the end-to-end phase, ``deploy/in_model.py``, and its schedules per heavy
    task): 0 where it does not run (off, shape buckets, a GPU or RPC devices, or a time budget under three times what
    even its guard takes); a budget under three times the whole phase gets the guard alone (1: the new best
    schedules against the database's, whole model); without a time budget it runs after the trials."""
    from autosched.deploy.in_model import expected_cost_s

    config = plan.config
    if not config.in_model or plan.fused is None or plan.target.kind.name != "llvm" or config.rpc:
        return 0.0, 0
    for n_variants in dict.fromkeys((config.in_model, 1)):
        cost = expected_cost_s(plan.n_groups, n_variants)
        if not plan.deadline.limited or config.time_budget_s >= 3 * cost:
            return cost, n_variants
    return 0.0, 0


def _in_model_phase(session: Any, plan: ModelPlan, result: Any, db: Database, started: float,
                    on_progress: Callable | None, n_variants: int) -> Any:
    """The end-to-end phase; a failure there is logged and leaves the database as the search left it."""
    from autosched.deploy.in_model import tune_in_model
    from autosched.errors import AutoschedError
    from autosched.scheduler.model_tuning import ModelProgress

    n_done = sum(s.n_trials for s in result.states)

    def report(text: str) -> None:
        if on_progress is not None:
            on_progress(ModelProgress(n_done, None, result.estimated_s, result.untuned_s, text, time.time() - started,
                                      n_done, plan.deadline.left_s()))

    try:
        return tune_in_model(session, plan.model, plan.fused, result.states, db, started, plan.deadline, report,
                             n_variants)
    except (AutoschedError, RuntimeError, ValueError, TimeoutError, ChildProcessError, OSError) as err:
        log.warning("%s: the end-to-end phase did not run to its end (%s: %s); the schedules stay as searched",
                    plan.model.name, type(err).__name__, str(err).splitlines()[0][:200] if str(err) else "")
        return None


@quiet_api
def extract_model_tasks(model: Any, target: str | Target = "llvm", n_threads: int | None = None,
                        shape_buckets: dict[str, tuple[int, ...]] | None = None, precision: str = "fp32"):
    """The graph rewrites, then one task per distinct fusion group (what ``tune_model`` tunes). With
    ``shape_buckets`` (``{"seq": (16, 32, 64)}``, an ONNX model with symbolic dimensions): every bucket's tasks,
    those structurally identical across buckets merged. ``precision``: ``bf16``/``fp16`` matmuls and convolutions
    (``autosched.graph.precision``)."""
    from autosched.graph.passes import extract_tasks

    target = build_target(target, n_threads)
    version = settings_for(target).version
    if shape_buckets:
        from autosched.deploy.buckets import merge_bucket_tasks

        _, loaded = rewritten_buckets(model, target, shape_buckets, precision)
        return merge_bucket_tasks([(sizes, extract_tasks(fused, target, version)) for sizes, _, fused in loaded])
    return extract_tasks(rewritten(_loaded(model, None, _no_step), target, precision), target, version)


@quiet_api
def tune_model(model: Any, target: str | Target = "llvm", db: str | Database = DEFAULT_DATABASE,
               config: TuneConfig | None = None, on_progress: Callable | None = None,
               shape_buckets: dict[str, tuple[int, ...]] | None = None, precision: str = "fp32", *,
               sampler: Any = None, runner: Any = None, builder: Any = None, cost_model: Any = None,
               callbacks: Sequence[Callable] | None = None):
    """Tune every fusion group of a model; ``config.n_trials`` per task on average, shared by the scheduler,
    and at most ``config.time_budget_s`` seconds from this call on (when set; ``n_trials=0`` then lifts the
    trial limit). ``shape_buckets``: the sizes of a model's symbolic dimensions to tune for (every bucket's
    tasks in one run); ``precision``: ``bf16``/``fp16`` matmuls and convolutions (compile with the same).
    ``sampler`` (an Optuna sampler or a name), ``runner``, ``builder``, ``cost_model`` (a CostModel or a name),
    ``callbacks`` (each given every progress event): the parts of the run as objects (``autosched/parts.py``).
    Returns a ``ModelTuneResult`` (per-task states; ``n_tasks``, ``n_tuned``, ``n_default``)."""
    config, parts = parts_of(config or TuneConfig(), sampler, runner, builder, cost_model, callbacks)
    return tune_planned_model(plan_model(model, target, config, shape_buckets, precision), db, on_progress, parts)


def prepare_model(model: Any, target: Target, precision: str = "fp32",
                  inputs: dict[str, tuple[int, ...]] | None = None, on_step: OnStep = _no_step,
                  on_note: OnNote = _log_note) -> tuple[Any, Any]:
    """(the model, its fused module): ``model`` imported (unless it is a Model already) and rewritten."""
    loaded = _loaded(model, inputs, on_step)
    with on_step(f"{loaded.name}: graph rewrites"):
        return loaded, rewritten(loaded, target, precision, on_note)


def compile_unscheduled(model: Any, target: Target, fused: Any = None) -> Any:
    """The model built without any schedule (TVM's defaults): the baseline ``autosched run`` times."""
    from autosched.deploy.build import compile_unscheduled as build

    return build(model, target, fused=fused)


@quiet_api
def compile(model: Any, target: str | Target = "llvm", db: str | Database | None = None,
            n_threads: int | None = None, shape_buckets: dict[str, tuple[int, ...]] | None = None,
            precision: str = "fp32", max_padding: float | None = None, cuda_graph: bool = False,
            inputs: dict[str, tuple[int, ...]] | None = None, on_step: OnStep = _no_step,
            on_note: OnNote = _log_note, on_progress: Callable[[str], None] | None = None, fused: Any = None):
    """Build a model with the best schedule of every tuned fusion group in ``db`` (default ones elsewhere).

    Returns a ``CompiledModel``: call it with numpy arrays, ``.time(...)`` it, or ``.export_library(path)``
    and load that later with ``autosched.load_compiled(path)``. With ``shape_buckets`` (an ONNX model with
    symbolic dimensions): a ``BucketedModel`` that takes inputs of any size (``autosched.deploy.buckets``);
    ``max_padding`` (e.g. 1.25) adds builds between the buckets with their schedules refitted, so that no size
    pads by more (``compile_buckets``).
    ``precision``: ``bf16``/``fp16`` matmuls and convolutions, as tuned; ``.precision_error`` is the max relative
    error against float32 on random inputs. ``cuda_graph`` (a CUDA target, fixed shapes): the kernel launches
    are captured once as CUDA graphs and replayed. ``on_progress`` gets each group's name as it is built;
    ``fused``: ``model``'s fused module from ``prepare_model`` (a Model given with it is not rewritten again).
    """
    if max_padding is not None and not shape_buckets:
        raise UserInputError("--max-padding goes with --shape-buckets (the sizes it fills in between)")
    target = build_target(target, n_threads)
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(opened(db, read_only=True)) if db is not None else None
        if shape_buckets:
            from autosched.deploy.buckets import compile_buckets

            symbolic, loaded = rewritten_buckets(model, target, shape_buckets, precision, inputs, on_step, on_note)

            def reload(sizes: dict[str, int]) -> Any:
                return _with_precision(load_model(model, {**(inputs or {}), **symbolic.shapes(sizes)}), precision)

            with on_step("compiling buckets"):
                return compile_buckets(symbolic, [(s, m) for s, m, _ in loaded], target, database, reload,
                                       on_progress, fused=[f for _, _, f in loaded], max_padding=max_padding)
        from autosched.deploy.build import compile_model

        if fused is None:
            model, fused = prepare_model(model, target, precision, inputs, on_step, on_note)
        with on_step(f"{model.name}: compiling"):
            return compile_model(model, target, database, fused=fused, cuda_graph=cuda_graph, on_progress=on_progress)


def load(path: str):
    """A tuned model saved by ``autosched compile -o``: an artifact (``model.autosched``, a zip file or a folder;
    ``autosched.deploy.artifact``), checked to run on this host and with this TVM, or a library (``model.so``
    with ``model.so.json``; ``load_compiled``). Call it with numpy arrays; it returns numpy arrays."""
    from autosched.deploy.artifact import load_artifact, looks_like_artifact

    return load_artifact(path) if looks_like_artifact(path) else load_compiled(path)


def load_compiled(path: str):
    """A model library written by ``CompiledModel.export_library`` or ``autosched compile -o`` (one build, or
    one per shape bucket)."""
    from autosched.deploy.library import load_compiled as _load

    return _load(path)
