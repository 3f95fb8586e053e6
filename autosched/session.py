"""A tuning session: real builder and runner, reference data, and the tune loop for a list of tasks."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable

import numpy as np

from autosched._tvm import Target, save_json
from autosched.apply import schedule_from_record, untuned
from autosched.config import COST_MODELS, TuneConfig
from autosched.cost import FeatureExtractor, RandomCostModel, XGBCostModel
from autosched.cost.base import CostModel
from autosched.db import Database, TaskRow
from autosched.errors import ReferenceBuildError, UnknownNameError
from autosched.measure import worker
from autosched.measure.base import Builder, Runner, TaskIO
from autosched.measure.local import LocalBuilder, LocalRunner
from autosched.parts import NO_PARTS, Parts
from autosched.paths import data_dir
from autosched.records import BuildResult, Candidate, MeasureResult, Status, schedule_key
from autosched.scratch import ScratchDir
from autosched.search.optuna_strategy import OptunaStrategy, seen_from_records
from autosched.search.screen import ModelScreen
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import device_kind, host_target, target_json, use_nvcc_without_nvrtc
from autosched.tasks import INPUT_DOMAINS, Task
from autosched.tune import NO_DEADLINE, Deadline, TuneProgress, TuneResult, tune_task

log = logging.getLogger("autosched.session")


def make_screen(cfg: TuneConfig, space: TraceSearchSpace, target_family: str,
                cost_model: CostModel | None = None) -> ModelScreen | None:
    """The cost-model screen the config asks for (None: every proposal is measured), or the one of the user's
    ``cost_model`` object (refit online only where it is an ``XGBCostModel``)."""
    if cost_model is not None:
        return ModelScreen(FeatureExtractor(space.context), start_model=cost_model, pool_factor=cfg.pool_factor,
                           explore=cfg.explore, seed=cfg.seed, online=isinstance(cost_model, XGBCostModel))
    if cfg.cost_model == "none":
        return None
    start = None
    if cfg.cost_model == "xgb" and cfg.transfer:
        start = load_start_model(cfg.transfer_model, target_family)
    elif cfg.cost_model == "random":
        start = RandomCostModel(cfg.seed).fit(np.zeros((1, 1)), np.zeros(1), np.zeros(1))
    elif cfg.cost_model != "xgb":
        raise UnknownNameError("cost model", cfg.cost_model, list(COST_MODELS))
    return ModelScreen(FeatureExtractor(space.context), start_model=start, pool_factor=cfg.pool_factor,
                       explore=cfg.explore, seed=cfg.seed, online=cfg.cost_model == "xgb")


def load_start_model(path: str, target_family: str) -> XGBCostModel | None:
    """An explicit model folder, else the shipped ``cost_models/<target kind>`` if present."""
    if path:
        return XGBCostModel.load(path, target_family)
    shipped = data_dir("cost_models") / target_family
    return XGBCostModel.load(shipped, target_family) if (shipped / "meta.json").exists() else None


def warm_screen(screen: ModelScreen, task: Task, records: list) -> None:
    """A resumed run: the model learns from what earlier runs measured (their traces are replayed)."""
    built = [r for r in records if r.status is not Status.INVALID and r.trace_json]
    if not built:
        return
    keys = [schedule_key(r.decisions) for r in built]
    screen.features([schedule_from_record(task.mod, r) for r in built], keys)
    screen.observe(keys, [MeasureResult(r.status, list(r.latencies_s), r.error) for r in built])


def describe_check(outputs: list[np.ndarray], domain: str) -> str:
    """How candidates can be checked against these reference outputs: "full" (every value finite; with the
    input domain when it is not the first), "partial: ..." (only the finite values can be compared) or "none"."""
    arrays = [np.asarray(o) for o in outputs]
    n_values = sum(a.size for a in arrays)
    n_bad = sum(int((~np.isfinite(a)).sum()) for a in arrays if np.issubdtype(a.dtype, np.floating))
    if n_bad == 0:
        return "full" if domain == next(iter(INPUT_DOMAINS)) else f"full ({domain} inputs)"
    if n_bad == n_values:
        return "none: every reference output is inf or nan"
    return f"partial: {n_bad} of {n_values} reference outputs are inf or nan"


def same_release(a: str, b: str) -> bool:
    """Same TVM major.minor (0.27.0.post1 ~ 0.27.1): patch releases keep schedules valid."""
    return a.split(".")[:2] == b.split(".")[:2]


def check_tvm_version(db: Database, task: Task) -> None:
    """Records of this task measured with another TVM release: their schedules may not replay, or time the same,
    with this one. Refused before anything is written (resuming would mix them with new measurements)."""
    from collections import Counter

    from autosched._tvm import TVM_VERSION
    from autosched.errors import IncompatibleArtefactError

    others = Counter(r.tvm_version for r in db.records(task.key) if not same_release(r.tvm_version, TVM_VERSION))
    if others:
        found = ", ".join(f"{n} with TVM {v}" for v, n in sorted(others.items()))
        raise IncompatibleArtefactError(
            f"the database holds records of {task.name} measured {found}; this is TVM {TVM_VERSION}: tune into a new "
            "--db, or use the TVM that wrote them")


def make_runner(cfg: TuneConfig, device: str = "cpu") -> Runner:
    """The runner the config asks for: on this machine's ``device`` ('cpu', 'cuda'), or on that device of the
    machines under ``rpc_key`` at ``rpc``."""
    args = (cfg.run_timeout_s, cfg.repeat, cfg.min_repeat_ms, cfg.rtol, cfg.atol, device)
    if cfg.rpc:
        from autosched.measure.rpc import RPCRunner

        # n_threads 0: the remote device's own default (all its cores), not this machine's core count
        return RPCRunner(cfg.tracker, cfg.rpc_key, cfg.n_threads or None, *args, cutoff_ratio=cfg.cutoff_ratio,
                         condition=cfg.condition)
    return LocalRunner(cfg.threads, *args, cutoff_ratio=cfg.cutoff_ratio, condition=cfg.condition)


BASELINE_TIMED_ONCE_S = 0.01  # an untuned build whose checking run takes longer is timed by one more run


class TuningSession:
    """Owns the worker processes and the scratch folder; use as a context manager."""

    def __init__(self, config: TuneConfig, target: Target | str, builder: Builder | None = None,
                 runner: Runner | None = None, parts: Parts = NO_PARTS):
        """``target``: a ``Target`` or its JSON (``Task.target_json``): what the build workers compile for.
        ``builder``/``runner`` (or ``parts``'): used instead of the session's own, and not closed by it (they are the
        caller's); ``parts``' sampler and cost model replace the config's named ones."""
        self.config, self.parts = config, parts
        builder, runner = builder or parts.builder, runner or parts.runner
        self._owned = [name for name, part in (("builder", builder), ("runner", runner)) if part is None]
        built_for = target if isinstance(target, str) else target_json(target)
        self._tmp = ScratchDir()
        self._reference_libraries: dict[str, str] = {}  # task key -> its unscheduled library, until measured
        self.device = device_kind(target if isinstance(target, Target) else Target(json.loads(target)))
        self.builder = builder or LocalBuilder(built_for, config.n_build_workers or None,
                                               config.build_timeout_for(self.device), work_dir=self._tmp.name)
        if self.device == "cuda":
            use_nvcc_without_nvrtc()  # before the build workers start
        self.runner = runner or make_runner(config, self.device)

    def __enter__(self) -> TuningSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for name in self._owned:
            getattr(self, name).close()
        self._tmp.cleanup()

    # --- reference data ------------------------------------------------------------------------------------
    def prepare_io(self, task: Task) -> TaskIO:
        """Inputs and reference outputs for a task, in a .npz the runner workers load once.

        Non-constant float inputs are drawn from each of ``INPUT_DOMAINS`` in turn until the reference output
        is finite. ``task.info["check"]`` says how well candidates can be checked: "full", or why not."""
        path = os.path.join(self._tmp.name, f"io-{task.key}.npz")
        io = TaskIO(path, task.n_outputs)
        if os.path.exists(path):
            return io
        out_specs = task.arg_specs()[-task.n_outputs:]
        shapes = {}
        for i, (shape, dtype) in enumerate(out_specs):
            shapes[f"shape_out{i}"], shapes[f"dtype_out{i}"] = np.array(shape, "int64"), np.array(dtype)
        library = None
        for domain in INPUT_DOMAINS:
            inputs = task.random_inputs(self.config.seed, domain)
            arrays = {**{f"in{i}": x for i, x in enumerate(inputs)}, **shapes}
            if task.reference is not None:
                outputs = task.reference(inputs)
            elif self.device != "cpu":  # a GPU's reference: the task computed by this machine's CPU
                worker.save_io(path, arrays)
                outputs = self._reference_on_cpu(task, path)
            else:
                worker.save_io(path, arrays)
                library = library or self._unscheduled_library(task)
                outputs = self.runner.reference_outputs(library, io)
            task.info["check"] = describe_check(outputs, domain)
            if task.info["check"].startswith("full"):
                break
        if task.info["check"].startswith(("partial", "none")):
            log.warning("%s: reference output not finite for any input domain; %s", task.name, task.info["check"])
        arrays.update({f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
        worker.save_io(path, arrays)
        return io

    def _reference_on_cpu(self, task: Task, io_path: str) -> list[np.ndarray]:
        """Outputs of the unscheduled task built for and run on this machine's CPU (a one-off, in this process):
        the reference for a task tuned for another device, which shares no code with its candidates."""
        path = os.path.join(self._tmp.name, f"cpu-reference-{task.key}.so")
        if not os.path.exists(path):
            try:
                worker.build(save_json(task.mod), target_json(host_target(self.config.threads)), path)
            except Exception as err:  # TVM's build errors
                raise ReferenceBuildError(f"{task.name} does not build for this CPU, so it has no reference: "
                                          f"{str(err).strip().splitlines()[-1][:200]}") from err
        return worker.run(path, io_path, task.n_outputs, "cpu", 1, 0, 0.0, 0.0, check=False)["outputs"]

    def _unscheduled_library(self, task: Task) -> str:
        """The reference build. It is a one-off, not a candidate: one that runs past the builders' timeout (a
        big erf expansion on a loaded machine) is built again here, without a timeout."""
        (build,) = self.builder.build([Candidate(task.key, {}, mod_json=save_json(task.mod))])
        path = build.artifact_path
        if build.status is not Status.OK:
            path = os.path.join(self._tmp.name, f"reference-{task.key}.so")
            try:
                worker.build(save_json(task.mod), task.target_json, path)
            except Exception as err:  # TVM's build errors
                raise ReferenceBuildError(f"the unscheduled {task.name} does not build: {build.error}") from err
        self._reference_libraries[task.key] = path
        return path

    def measure_unscheduled(self, task: Task) -> MeasureResult:
        """TVM's default build of the task, measured like any candidate (the 'untuned' baseline)."""
        io = self.prepare_io(task)
        cand = Candidate(task.key, {}, mod_json=save_json(untuned(task.mod, task.target)))
        library = self._reference_libraries.pop(task.key, None)  # the reference build is this very build
        builds = [BuildResult(cand, library)] if library else self.builder.build([cand])
        self.runner.time_once_above(io, BASELINE_TIMED_ONCE_S)
        return self.runner.run(builds, io)[0]

    # --- tuning --------------------------------------------------------------------------------------------
    def strategy(self, task: Task, db: Database) -> OptunaStrategy:
        """The task's Optuna search (resuming its study), screened by the configured cost model."""
        cfg = self.config
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target), seed=cfg.seed)
        records = db.records(task.key)
        screen = make_screen(cfg, space, task.target.kind.name, self.parts.cost_model)
        if screen is not None:
            warm_screen(screen, task, records)
        sampler = self.parts.sampler_for(task) or cfg.sampler
        strategy = OptunaStrategy(space, task.key, db.optuna_storage(), sampler, cfg.seed,
                                  seen=seen_from_records(records), screen=screen, about=task.about())
        for params in space.gpu_seeds():  # measured first (those measured already are not proposed again)
            strategy.propose(params)
        return strategy

    def tune(self, task: Task, db: Database, on_progress: Callable[[TuneProgress], None] | None = None,
             strategy: OptunaStrategy | None = None, n_trials: int | None = None,
             deadline: Deadline = NO_DEADLINE) -> TuneResult:
        """Measure until the task has ``n_trials`` (default: the config's) measurements in ``db``, or until
        ``deadline``."""
        cfg = self.config
        checked = self.__dict__.setdefault("_checked", set())  # (database, task key) pairs already checked
        if (id(db), task.key) not in checked:  # a model's tasks are tuned in many rounds: check once
            check_tvm_version(db, task)
            checked.add((id(db), task.key))
        db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, save_json(task.mod),
                               task.flops, task.info))
        with db.leases().holding(task.key, deadline.left_s):  # no other worker on the task meanwhile; not got:
            strategy = strategy or self.strategy(task, db)  # the deadline passed and tune_task measures nothing
            return tune_task(task, strategy, self.builder, self.runner, db, self.prepare_io(task),
                             n_trials or cfg.n_trials, cfg.batch_size, on_progress, deadline)
