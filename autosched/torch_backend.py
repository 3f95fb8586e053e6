"""``torch.compile(model, backend="autosched")``: each graph dynamo captures is imported into Relax, its tasks tuned
(within a time budget, at the graph's first call), compiled with the database's best schedules and run with torch
tensors in and out.

- ``backend(db=..., time="2m", threads=..., target=...)`` makes a backend with options; the name ``"autosched"``
  is the default one, or the one for ``torch.compile``'s ``options={"time": "5m", ...}`` (the
  ``torch_dynamo_backends`` entry point of an installed autosched; importing this module registers it too, for a
  source checkout).
- Each captured graph (dynamo cuts a model at its graph breaks, and calls the backend once per piece) is built at
  its first call, for the sizes of that call: parameters and buffers (which dynamo passes as inputs) become
  constants, so the graph rewrites fold them and the schedules may change their layout; a parameter replaced or
  changed in place is noticed at the next call and the graph rebuilt (from the database, without tuning).
- Tuning: ``time`` for the backend's whole model (all its captured graphs and sizes; ``spent_s`` so far), spent
  only on tasks without records in the database (a second run of the same script tunes nothing), or on all of its
  tasks with ``tune_again=True`` (a longer search resuming from the records: tasks an earlier, shorter budget never
  searched get their rounds); ``time=0`` only looks records up.
- A graph that cannot be imported (an operator TVM's PyTorch importer lacks, or imports wrongly: the RNNs), that
  writes to its inputs through a view, that fails to build, or whose outputs differ from eager
  PyTorch's at the first call runs eagerly, with one line saying why; never an exception at the user's call.
- Inference only: outputs carry no autograd history (a call that would need gradients says so once).

- A new size of a graph already built is built from the database with the first size's schedules refitted (never
  tuned at a call); at most ``max_builds`` sizes are kept per graph. In-place writes to a graph's inputs (HF's
  static KV cache) are made functional and copied back after each call (``autosched.torch_mutations``).

``stats`` of a backend lists each graph built: tasks, tasks tuned, new records, schedules, seconds, or why eager;
``profile`` where the calls' time goes (lookup, weight check, hand-off, TVM).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import logging
import math
import os
import re
import sys
import threading
import time as _time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autosched.config import TuneConfig, parse_duration
from autosched.db.base import display_name
from autosched.errors import AutoschedError, UserInputError
from autosched.masking import mask_secrets
from autosched.torch_mutations import VIEWS as _VIEWS
from autosched.torch_mutations import functionalize

log = logging.getLogger("autosched.torch")

NAME = "autosched"  # the backend's name for torch.compile
ENTRY_POINT_GROUP = "torch_dynamo_backends"  # where dynamo looks up backends of installed packages
DEFAULT_TIME = "2m"  # tuning budget of a backend (all its captured graphs and sizes)
MAX_BUILDS = 64  # sizes of one captured graph kept built


def default_database() -> str:
    """Where the backend keeps its tuning records unless told: ``$AUTOSCHED_DB``, else the user's cache
    (``$XDG_CACHE_HOME/autosched/torch.db``, ``~/.cache/autosched/torch.db``), so that any script in any folder
    reuses what an earlier run tuned."""
    if os.environ.get("AUTOSCHED_DB"):
        return os.environ["AUTOSCHED_DB"]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(cache / "autosched" / "torch.db")


@dataclass
class GraphStats:
    """One captured graph at one set of input sizes, as the backend built it."""

    graph: int  # the captured graph's number in this backend (dynamo's order)
    shapes: str  # the runtime inputs' shapes, e.g. "1x3x224x224"
    mode: str = "eager"  # "autosched" (compiled) | "eager" (fallback)
    reason: str = ""  # eager: why
    n_tasks: int = 0
    n_tuned: int = 0  # tasks given to the tuner at this build (those without records, or all with ``tune_again``)
    n_new_records: int = 0  # measurements this build added to the database
    n_records: int = 0  # the graph's tasks' records in the database after the build
    sources: dict[str, int] = field(default_factory=dict)  # schedule source (tuned, default, ...) -> fusion groups
    build_s: float = 0.0  # import, tuning and compiling
    max_error: float = 0.0  # largest difference from eager PyTorch at the first call (relative to its largest value)


@dataclass
class CallProfile:
    """Where the calls of a backend's graphs spend their time (seconds summed over the calls), builds excluded:
    ``lookup`` (finding the call's build by its signature), ``check`` (its weights are the ones built in),
    ``handoff`` (tensors to TVM and back, by DLPack: no copy unless an input is not contiguous), ``run`` (TVM)."""

    calls: int = 0  # calls of a built graph
    eager_calls: int = 0  # calls run eagerly (a graph autosched could not build)
    builds: int = 0  # builds made at a call (a new signature, or weights replaced or changed in place)
    lookup_s: float = 0.0
    check_s: float = 0.0
    handoff_s: float = 0.0
    run_s: float = 0.0

    def per_call_us(self) -> dict[str, float]:
        """Microseconds per call of a built graph, by part."""
        n = max(self.calls, 1)
        return {k: 1e6 * getattr(self, f"{k}_s") / n for k in ("lookup", "check", "handoff", "run")}

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in self.per_call_us().items())
        return f"{self.calls} calls ({self.eager_calls} eager, {self.builds} builds); us per call: {parts}"


class AutoschedBackend:
    """A ``torch.compile`` backend: ``torch.compile(model, backend=autosched.backend(time="5m"))``."""

    def __init__(
        self,
        db: str | None = None,
        time: str | float = DEFAULT_TIME,
        threads: int | None = None,
        target: str = "llvm",
        config: TuneConfig | None = None,
        check: bool = True,
        verbose: bool = True,
        tune_again: bool = False,
    ):
        self.db = str(db) if db is not None else default_database()
        self.time_s = parse_duration(time, allow_zero=True) if isinstance(time, str) else float(time)
        if not 0 <= self.time_s < math.inf:
            raise UserInputError(f"time must be 0 (no tuning) or a positive duration, got {time!r}")
        if threads is not None and threads < 0:
            raise UserInputError(f"threads must be at least 1 (or 0 for all cores), got {threads}")
        if not isinstance(target, str) or target.split()[:1] != ["llvm"]:
            raise UserInputError(f"the torch.compile backend builds for this CPU: give an llvm target, got {target!r}")
        base = config or TuneConfig()
        self.lookup_config = base.replace(n_threads=threads, time_budget_s=0.0)  # a build from the records only
        self.config = self.lookup_config.replace(time_budget_s=self.time_s, n_trials=0 if self.time_s else None)
        self.target = target
        self.check = check  # compare the first call's outputs with eager PyTorch's
        self.verbose = verbose
        self.tune_again = tune_again  # tune tasks that have records too (else only those without)
        self.stats: list[GraphStats] = []
        self.profile = CallProfile()  # per-call time of the built graphs, by part
        self.spent_s = 0.0  # seconds of tuning so far: ``time`` bounds all graphs and sizes together
        self.max_builds = MAX_BUILDS  # per captured graph: its sizes built and kept (least recently called dropped)
        self._n_graphs = 0

    def tuning_config(self) -> TuneConfig:
        """The config of a build that may tune: what is left of ``time`` (none left: records only)."""
        left = self.time_s - self.spent_s
        return self.config.replace(time_budget_s=left) if left > 1.0 else self.lookup_config

    def __call__(self, gm: Any, example_inputs: Sequence[Any]) -> Callable:
        """What dynamo calls for each captured graph: a callable that runs it (built at its first call)."""
        self._n_graphs += 1
        return _Graph(self, gm, example_inputs, self._n_graphs - 1)

    def say(self, text: str) -> None:
        if self.verbose:
            print(f"autosched: {mask_secrets(text)}", file=sys.stderr, flush=True)

    def __repr__(self) -> str:
        again = ", tune_again=True" if self.tune_again else ""
        db = mask_secrets(repr(self.db))
        return f"autosched.backend(db={db}, time={self.time_s:g}, threads={self.config.n_threads}{again})"


def backend(
    db: str | None = None,
    time: str | float = DEFAULT_TIME,
    threads: int | None = None,
    target: str = "llvm",
    config: TuneConfig | None = None,
    check: bool = True,
    verbose: bool = True,
    tune_again: bool = False,
) -> AutoschedBackend:
    """A ``torch.compile`` backend with options: ``db`` (default ``default_database()``), ``time`` (tuning
    budget of the backend, all its graphs and sizes together: ``"2m"``, ``90``; ``0`` = only the database's records),
    ``threads`` (of the
    tuned and run kernels; None or 0 = all cores), ``target`` (an LLVM target string), ``config`` (a
    ``TuneConfig`` for the other tuning settings), ``check`` (compare the first call's outputs with eager
    PyTorch's; a difference falls back to eager), ``verbose`` (a line on stderr per graph built), ``tune_again``
    (spend ``time`` on every task of a graph, those with records too: a longer search resumes from them; default:
    only the tasks without records are tuned, so a rerun tunes nothing)."""
    register()
    return AutoschedBackend(db, time, threads, target, config, check, verbose, tune_again)


_BY_OPTIONS: dict[tuple, AutoschedBackend] = {}  # the named backend's instances, one per set of options
_OPTIONS = ("db", "time", "threads", "target", "check", "verbose", "tune_again")


def autosched_backend(
    gm: Any, example_inputs: Sequence[Any], mode: str | None = None, options: dict[str, Any] | None = None
) -> Callable:
    """The backend ``torch.compile(model, backend="autosched")`` names: ``backend()``'s defaults, or the
    ``options={"time": "5m", "threads": 1, "db": ...}`` given to ``torch.compile`` (the same options share one
    backend; ``mode`` is Inductor's and is refused)."""
    if mode is not None:
        raise UserInputError(
            f"torch.compile(mode={mode!r}) is Inductor's: autosched takes options={{'time': '5m', "
            "...}} or backend=autosched.backend(...)"
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise UserInputError(f"unknown autosched option(s) {', '.join(unknown)}: valid are {', '.join(_OPTIONS)}")
    key = tuple(sorted((k, str(v)) for k, v in options.items()))
    if key not in _BY_OPTIONS:
        _BY_OPTIONS[key] = AutoschedBackend(**options)
    return _BY_OPTIONS[key](gm, example_inputs)


def register() -> None:
    """Give dynamo the name ``"autosched"`` unless it has it (or will load it from the installed entry point)."""
    from importlib.metadata import entry_points

    registry = sys.modules.get(_REGISTRY) or importlib.import_module(_REGISTRY)
    if NAME in registry._COMPILER_FNS or NAME in entry_points(group=ENTRY_POINT_GROUP).names:
        return
    registry.register_backend(autosched_backend, name=NAME)


_REGISTRY = "torch._dynamo.backends.registry"


class _RegisterWhenDynamoLoads(importlib.abc.MetaPathFinder):
    """Registers the name as soon as dynamo's registry is imported (by the first ``torch.compile``): importing
    dynamo here would add seconds to ``import autosched``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            sys.modules[name] = module
            register()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


# --- one captured graph ---------------------------------------------------------------------------------------
_WEIGHT_SOURCE = re.compile(r"\._(parameters|buffers)\[")


class _Graph:
    """A captured graph: one build per input signature (shapes, dtypes, integer arguments), made at its first call.
    ``weights``: the positions of the inputs that are the model's parameters and buffers (constants in a build)."""

    def __init__(self, owner: AutoschedBackend, gm: Any, example_inputs: Sequence[Any], index: int):
        import torch

        self.owner, self.gm, self.index = owner, gm, index
        self.weights: list[int] = []
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i, (node, value) in enumerate(zip(placeholders, example_inputs, strict=False)):
            source = getattr(node.meta.get("grapharg"), "source", None)
            name = source.name if source is not None else ""
            if isinstance(value, torch.nn.Parameter) or _WEIGHT_SOURCE.search(name):
                self.weights.append(i)
        self.inputs = [i for i in range(len(example_inputs)) if i not in self.weights]
        self.builds: OrderedDict[tuple, _Build] = OrderedDict()  # least recently called first
        self.said_evicted = False
        self.lock = threading.Lock()  # two threads' first calls: one build (the other waits for it, then runs it)
        self.eager_reason = ""  # set once the graph cannot be built at all (then every call runs eagerly)
        functional = functionalize(gm)  # in-place writes (a static KV cache's) made functional
        self.functional_gm, self.written = functional or (gm, [])  # written: inputs copied back after each call
        self.donor: Any = None  # the first build's fused module: its schedules refitted to the graph's other sizes
        self.said_refit = False

    def __call__(self, *args: Any) -> Any:
        profile = self.owner.profile
        if self.eager_reason:
            profile.eager_calls += 1
            return self.gm(*args)
        started = _clock()
        key = self._signature(args)
        build = self.builds.get(key)
        looked_up = _clock()
        if build is None or not build.current(args):
            with self.lock:  # a build at a time; a second thread's call finds it made
                build = self.builds.get(key)
                if build is None or not build.current(args):
                    build = self._build(args, tune=build is None and not self.builds)
                    self.builds[key] = build
                    self._bound_builds()
                    profile.builds += 1
            checked = looked_up  # the build's time is in its stats, not the call's
        else:
            self.builds.move_to_end(key)
            checked = _clock()
        if build.compiled is None:
            profile.eager_calls += 1
            return self.gm(*args)
        profile.calls += 1
        profile.lookup_s += looked_up - started
        profile.check_s += checked - looked_up
        return build(args, profile)

    def _bound_builds(self) -> None:
        """At most ``owner.max_builds`` sizes kept (a generation loop with a growing dynamic KV cache makes one per
        token): the least recently called dropped, saying so once."""
        while len(self.builds) > self.owner.max_builds:
            self.builds.popitem(last=False)
            if not self.said_evicted:
                self.said_evicted = True
                self.owner.say(
                    f"graph {self.index}: more than {self.owner.max_builds} sizes built; the least recently called "
                    "are dropped (rebuilt from the database if called again). Fixed sizes avoid this (for "
                    'generate: cache_implementation="static")'
                )

    def _signature(self, args: Sequence[Any]) -> tuple:
        """The inputs' shapes, dtypes and devices, and the integers (sizes dynamo made symbolic); the weights are
        checked by ``_Build.current``."""
        return tuple(
            [(a.shape, a.dtype, a.device) if hasattr(a, "shape") else a for a in map(args.__getitem__, self.inputs)]
        )

    def _build(self, args: Sequence[Any], tune: bool) -> _Build:
        """Build for ``args``' signature; TVM's and the libraries' output goes to autosched's log file meanwhile,
        and what the user should know is printed after, one line per graph."""
        from autosched.native_log import default_log_path, native_output_to

        owner, started = self.owner, _time.perf_counter()
        inputs = [i for i, a in enumerate(args) if i not in self.weights and hasattr(a, "shape")]
        shapes = ", ".join("x".join(map(str, args[i].shape)) or "scalar" for i in inputs)
        stats = GraphStats(self.index, shapes)
        build = _Build(self, args, inputs, stats)
        left = owner.tuning_config().time_budget_s if tune else 0.0
        if left > 0:
            owner.say(
                f"graph {self.index} ({shapes}): building; its tasks without records in "
                f"{display_name(owner.db)} are "
                f"tuned for up to {left:.0f} s (what is left of the backend's {owner.time_s:g} s)"
            )
        elif self.donor is not None and not self.said_refit:
            self.said_refit = True
            owner.say(
                f"graph {self.index} ({shapes}): a new size of a built graph: built from {display_name(owner.db)} "
                "with its first size's schedules refitted, never tuned at a call (once per graph)"
            )
        try:
            with native_output_to(default_log_path()):
                build.make(tune)
            line = (
                f"graph {self.index} ({shapes}): {stats.n_tasks} tasks, "
                + ", ".join(f"{n} {s}" for s, n in sorted(stats.sources.items()))
                + " fusion groups"
            )
            owner.say(line + (f", {stats.n_new_records} new records" if stats.n_new_records else ""))
        except Exception as why:  # _Eager, or anything else: the call goes on eagerly
            stats.reason = mask_secrets(str(why) if isinstance(why, _Eager) else f"autosched failed: {_reason(why)}")
            if getattr(why, "permanent", False):
                self.eager_reason = stats.reason
            log.warning("autosched: graph %d (%s) runs eagerly: %s", self.index, shapes, stats.reason)
        stats.build_s = _time.perf_counter() - started
        owner.stats.append(stats)
        return build


class _Eager(Exception):
    """Why a graph runs eagerly; ``permanent``: at every size (an unsupported operator)."""

    def __init__(self, reason: str, permanent: bool = False):
        super().__init__(reason)
        self.permanent = permanent


class _Build:
    """One captured graph built for one signature: the compiled model, the weights it holds as constants (checked
    at each call: the same tensors, not changed in place) and how to put its outputs back in dynamo's structure."""

    def __init__(self, graph: _Graph, args: Sequence[Any], inputs: list[int], stats: GraphStats):
        self.graph, self.inputs, self.stats = graph, inputs, stats
        self.weights = [(i, args[i], args[i]._version) for i in graph.weights]
        self.args = args
        self.compiled: Any = None
        self.function: Any = None  # the VM's entry function: TVM tensors in, out
        self.spec: Any = None  # the eager outputs' pytree structure
        self.warned_grad = False

    def current(self, args: Sequence[Any]) -> bool:
        """Whether the weights of ``args`` are the ones built in (same tensors, not changed in place since: the
        identity and the version counter, never the contents)."""
        for i, t, v in self.weights:
            if args[i] is not t or t._version != v:
                return False
        return True

    def __call__(self, args: Sequence[Any], profile: CallProfile) -> Any:
        import torch

        if not self.warned_grad and torch.is_grad_enabled() and any(getattr(a, "requires_grad", False) for a in args):
            self.warned_grad = True
            log.warning(
                "autosched: graph %d runs for inference: its outputs carry no gradient (call the model "
                "under torch.no_grad() or torch.inference_mode() to silence this)",
                self.graph.index,
            )
        started = _clock()
        tensors = [_to_tvm(args[i]) for i in self.inputs]
        handed = _clock()
        results = _flatten(self.function(*tensors))
        ran = _clock()
        n = len(results) - len(self.graph.written)
        for i, t in zip(self.graph.written, results[n:], strict=True):  # what the graph wrote to its inputs
            args[i].copy_(torch.from_dlpack(t))
        outputs = torch.utils._pytree.tree_unflatten([torch.from_dlpack(t) for t in results[:n]], self.spec)
        profile.handoff_s += handed - started + _clock() - ran
        profile.run_s += ran - handed
        return outputs

    def make(self, tune: bool) -> None:
        import torch

        from autosched import api

        owner, stats, args = self.graph.owner, self.stats, self.args
        weights = set(self.graph.weights)
        copies = [a.clone() if isinstance(a, torch.Tensor) and i not in weights else a for i, a in enumerate(args)]
        with torch.no_grad():  # on copies of the inputs: the writes of the graph to them are compared too
            reference = self.graph.gm(*copies)
        flat, self.spec = torch.utils._pytree.tree_flatten(reference)
        if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in flat) or not flat:
            raise _Eager("it returns something other than CPU tensors", permanent=True)
        if any(a.device.type != "cpu" for a in args if isinstance(a, torch.Tensor)):
            raise _Eager("its inputs are not on the CPU", permanent=True)
        if weights & set(self.graph.written):
            raise _Eager("it changes a parameter or buffer in place", permanent=True)
        written = _written_inputs(self.graph.functional_gm)
        if written:  # TVM's build would drop the writes
            raise _Eager(
                f"it changes its input{'s' if len(written) > 1 else ''} {', '.join(written[:3])} in place",
                permanent=True,
            )
        wrong = sorted({_op_name(n) for n in self.graph.gm.graph.nodes if _op_name(n) in WRONG_OPERATORS})
        if wrong:
            raise _Eager(f"operator {', '.join(wrong)} (TVM's importer computes it wrongly)", permanent=True)
        example = tuple(args[i].detach().contiguous() for i in self.inputs)
        module = _bound_module(self.graph.functional_gm, args, self.inputs)
        name = f"torch_graph{self.graph.index}"
        try:
            model = api.load_model(module, example_inputs=example, name=name)
        except Exception as err:  # export or import: an operator the importer lacks, mostly
            raise _Eager(_import_failure(err), permanent=True) from err
        if model.info.get("mutated_inputs"):  # TVM's importer would drop the writes
            raise _Eager(
                f"it changes its inputs in place ({', '.join(model.info['mutated_inputs'][:3])})", permanent=True
            )
        config = owner.tuning_config() if tune else owner.lookup_config
        try:
            self.compiled, fused = _compile(owner, model, config, stats, self.graph.donor)
        except Exception as err:  # a build TVM refuses: this graph runs eagerly, the user's call goes on
            raise _Eager(f"autosched could not build it: {_reason(err)}") from err
        with torch.no_grad():
            outputs = list(self.compiled(*example))
        flat = [*flat, *(copies[i] for i in self.graph.written)]  # the written inputs' new values come last
        stats.max_error = _max_error(outputs, flat)
        if owner.check and (len(outputs) != len(flat) or stats.max_error > 1e-3):
            self.compiled = None
            raise _Eager(f"its outputs differ from eager PyTorch's (max relative error {stats.max_error:.2g})")
        stats.mode = "autosched"
        self.function = self.compiled.function
        if self.graph.donor is None:
            self.graph.donor = fused
        self.args = ()  # the inputs of the first call are not kept alive


_clock = _time.perf_counter


def _to_tvm(t: Any) -> Any:
    """A torch tensor as a TVM tensor sharing its memory (DLPack); a copy only where it is not contiguous or not
    aligned as TVM's kernels assume."""
    from autosched._tvm import tvm_ffi
    from autosched.deploy.serving import ALIGNMENT

    t = t.detach()
    if not t.is_contiguous() or t.data_ptr() % ALIGNMENT:
        t = t.clone(memory_format=_contiguous())
    return tvm_ffi.from_dlpack(t, require_alignment=ALIGNMENT)


def _contiguous() -> Any:
    import torch

    return torch.contiguous_format


def _flatten(results: Any) -> list[Any]:
    from autosched.deploy.serving import _flatten as flatten

    return flatten(results)


def _compile(owner: AutoschedBackend, model: Any, config: TuneConfig, stats: GraphStats, donor: Any) -> tuple:
    """Plan, tune the tasks without records in the database (all with ``tune_again``; within ``config``'s budget,
    spent from the backend's), compile with it (``donor``'s records refitted to groups without any). Returns the
    compiled model and its fused module."""
    from autosched import api
    from autosched._tvm import set_num_threads
    from autosched.deploy.build import compile_model

    started = _clock()
    plan = api.plan_model(model, owner.target, config)
    stats.n_tasks, db = len(plan.tasks), owner.db
    if "://" not in db:
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    exists = "://" in db or Path(db).exists()
    before = _measured(db, plan.tasks) if exists else {}
    todo = [t for t in plan.tasks if owner.tune_again or not before.get(t.key)]  # else an earlier run's: not again
    if config.time_budget_s > 0 and todo:
        stats.n_tuned = len(todo)
        api.tune_planned_model(replace(plan, tasks=todo), db)
        owner.spent_s += _clock() - started  # the budget covers the import and rewrites too, as the plan's
        exists = True
    after = _measured(db, plan.tasks) if exists else {}
    stats.n_records = sum(after.values())
    stats.n_new_records = stats.n_records - sum(before.values())
    with api.opened(db, create=False) if exists else contextlib.nullcontext() as database:
        compiled = compile_model(
            plan.model, api.build_target(plan.target, None), database, fused=plan.fused, donor=donor
        )
    stats.sources = dict(compiled.counts())
    set_num_threads(plan.config.threads)
    return compiled, plan.fused


def _measured(db_path: str, tasks: list) -> dict[str, int]:
    """Task key -> its measured records in the database."""
    from autosched.db import open_database

    with open_database(db_path) as db:
        return {t.key: db.n_measured(t.key) for t in tasks}


def _bound_module(gm: Any, args: Sequence[Any], inputs: list[int]) -> Any:
    """``gm`` as a module of the runtime inputs only: the weights (and the integers dynamo passes for symbolic
    sizes) held as buffers and constants, so that ``torch.export`` lifts them as constants of the program."""
    import torch

    class Bound(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gm = gm
            self.fixed: dict[int, Any] = {}
            self.tensors: dict[int, str] = {}
            for i, a in enumerate(args):
                if i in inputs:
                    continue
                if isinstance(a, torch.Tensor):
                    self.tensors[i] = f"w{i}"
                    self.register_buffer(f"w{i}", a.detach(), persistent=False)
                else:
                    self.fixed[i] = int(a) if isinstance(a, torch.SymInt | int) else a
            self.n = len(args)

        def forward(self, *xs: Any) -> Any:
            given = iter(xs)
            full = [
                getattr(self, self.tensors[i])
                if i in self.tensors
                else self.fixed[i]
                if i in self.fixed
                else next(given)
                for i in range(self.n)
            ]
            return self.gm(*full)

    return Bound()


WRONG_OPERATORS = {"lstm", "gru", "rnn_tanh", "rnn_relu"}  # TVM 0.27 imports them, with wrong results


def _op_name(node: Any) -> str:
    return getattr(node.target, "__name__", "") if node.op == "call_function" else ""


_WRITES = {
    "setitem",
    "iadd",
    "isub",
    "imul",
    "itruediv",
    "ifloordiv",
    "imod",
    "ipow",
    "iand",
    "ior",
    "ixor",
    "__setitem__",
}


def _written_inputs(gm: Any) -> list[str]:
    """The graph's inputs (or views of them) that an in-place operation writes to (``x.add_``, ``x[0] = 1``,
    ``relu(x, inplace=True)``, ``x += y``): dynamo leaves them in the graph, TVM's import would drop them."""

    def name(node: Any) -> str:
        if node.op == "call_method":
            return str(node.target)
        return getattr(node.target, "__name__", "") if node.op == "call_function" else ""

    def root(node: Any) -> Any:
        while name(node) in _VIEWS and node.args and hasattr(node.args[0], "op"):
            node = node.args[0]
        return node

    written = []
    for node in gm.graph.nodes:
        op = name(node)
        in_place = (op.endswith("_") and not op.startswith("_")) or op in _WRITES or node.kwargs.get("inplace") is True
        if in_place and node.args and hasattr(node.args[0], "op") and root(node.args[0]).op == "placeholder":
            written.append(root(node.args[0]).name)
    return sorted(set(written))


_UNSUPPORTED = re.compile(r"Unsupported function types \[([^\]]*)\]")


def _import_failure(err: BaseException) -> str:
    """One line for a graph TVM cannot import: the operators it lacks where the importer named them."""
    text = " ".join(str(e) for e in _chain(err))
    match = _UNSUPPORTED.search(text)
    if match:
        names = sorted({n.strip().strip("'\"") for n in match.group(1).split(",") if n.strip()})
        return f"unsupported operator{'s' if len(names) > 1 else ''} {', '.join(names)}"
    return f"autosched could not import it: {_reason(err)}"


def _chain(err: BaseException) -> list[BaseException]:
    out = [err]
    while out[-1].__cause__ is not None and len(out) < 8:
        out.append(out[-1].__cause__)
    return out


def _reason(err: BaseException) -> str:
    if isinstance(err, AutoschedError):
        return mask_secrets(str(err).splitlines()[0])[:300]
    from autosched.graph.passes import failure_reason

    return mask_secrets(failure_reason(err))


def _max_error(outputs: Sequence[Any], reference: Sequence[Any]) -> float:
    """The largest difference over the outputs, each relative to its reference's largest value."""
    import torch

    worst = 0.0
    for got, want in zip(outputs, reference, strict=False):
        got = torch.as_tensor(got)
        if got.shape != want.shape or got.dtype != want.dtype:
            return math.inf
        if want.numel() == 0:
            continue
        if not want.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(got, want) else math.inf)
            continue
        scale = max(float(want.abs().max()), 1e-6)
        worst = max(worst, float((got.double() - want.double()).abs().max()) / scale)
    return worst


if _REGISTRY in sys.modules:  # torch.compile(model, backend="autosched") after importing autosched
    register()
elif not any(isinstance(f, _RegisterWhenDynamoLoads) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenDynamoLoads())
