"""Inference from the database: build a model with the best record of every tuned fusion group.

The same ``GRAPH_PASSES`` as at tuning time produce the groups, so each tuned task is found again by key.
Groups without a record get a default schedule (the search space's own design decisions), or stay
unscheduled where even that is illegal; for a CUDA GPU, where an unscheduled kernel does not build (no thread
bound), TVM's dlight rules schedule those.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosched._tvm import IRModule, Target, relax, set_num_threads, structural_hash, tirx, tvm
from autosched.apply import schedule_from_record, untuned
from autosched.db import Database
from autosched.deploy.serving import Caller
from autosched.errors import GraphError, InvalidConfig, UserInputError
from autosched.graph.frontends import InputSpec, Model
from autosched.graph.passes import (
    FINISH_PASSES,
    failure_reason,
    fusion_groups,
    group_module,
    rewrite,
    run_passes,
    ungroup,
)
from autosched.graph.precision import precision_of, with_precision
from autosched.records import Status
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import device_of, other_thread_counts, require_runs_here, runs_here
from autosched.tasks import target_json, task_key

log = logging.getLogger("autosched.build")

TUNED, DEFAULT, UNSCHEDULED = "tuned", "default", "unscheduled"
TRANSFERRED = "transferred"  # the best record of the same group at another size, refitted (shape buckets)
_LAZY_LOCK = threading.Lock()  # a compiled model's VM and caller, made at its first call
DLIGHT = "dlight"  # a GPU kernel scheduled by TVM's dlight rules (no record, no legal default schedule)


def default_schedule(mod: IRModule, target: Target) -> Any | None:
    """The first design whose own decisions, postprocessed, are a legal schedule; None if none is."""
    try:
        found = TraceSearchSpace(mod, target, settings_for(target)).default_schedule()
    except (RuntimeError, ValueError):
        return None
    return found[1] if found else None


def apply_database(fused: IRModule, target: Target, db: Database | None, default: bool = True,
                   on_group: Callable[[int, int], None] | None = None, donors: dict[str, IRModule] | None = None,
                   chosen: dict[str, Any] | None = None) -> tuple[IRModule, dict[str, str], dict[str, int], Counter]:
    """Replace every fusion group by its best stored schedule (else a default one: on a GPU dlight's, where
    its rules apply, else the search space's).

    A group with no record for this target but records for the same CPU at another thread count gets the best
    of those, from the nearest tuned thread count (a schedule is valid at any thread count; its parallel
    split was only tuned for another). A group with no record at all but a donor (``donors``: group name -> the
    same group at the sizes of a tuned shape bucket) gets the donor's best schedule with its tiles refitted to
    this group's sizes (``TraceSearchSpace.transfer``), where that is legal. Records measured with another TVM
    release, and those of tasks tuned for another target, are never applied. Returns (module, group -> tuned |
    transferred | default | unscheduled,
    group -> thread count of a record borrowed that way, why records were skipped -> how many). ``chosen``: task key
    -> the record to apply to that task's groups whatever the database holds (the end-to-end phase's trials)."""
    out = IRModule(fused.functions, attrs=fused.attrs) if fused.attrs else IRModule(fused.functions)
    space_version = settings_for(target).version
    alternatives = [(target, None)] + (other_thread_counts(target, [r.target for r in db.tasks()]) if db else [])
    sources: dict[str, str] = {}
    borrowed: dict[str, int] = {}
    skipped = _records_of_other_targets(db, [t for t, _ in alternatives])
    groups = fusion_groups(fused)
    defaults: dict[int, Any] = {}  # structural hash of a group -> its default schedule (a model repeats layers)
    for done, group in enumerate(groups):
        if on_group is not None:
            on_group(done, len(groups))
        mod = group_module(group.func)
        best, threads = _best_of_alternatives(db, mod, alternatives, space_version, skipped, chosen)
        sch = _replayed(mod, best, skipped) if best is not None else None
        sources[group.name] = TUNED
        if sch is None and donors is not None and group.name in donors:
            sch = _transferred(mod, donors[group.name], target, db, alternatives, space_version)
            sources[group.name] = TRANSFERRED
        func = sch.mod["main"] if sch is not None else None
        if func is None and default and is_gpu(target):  # what the tuner measured as this group's baseline
            func = _dlight_schedule(mod, target)
            sources[group.name] = DLIGHT
        if func is None:
            shape = structural_hash(mod)
            if shape not in defaults:
                defaults[shape] = default_schedule(mod, target) if default else None
            sch = defaults[shape]
            func = sch.mod["main"] if sch is not None else None
            sources[group.name] = DEFAULT if sch is not None else UNSCHEDULED
        if best is not None and threads is not None:
            borrowed[group.name] = threads
        if func is not None:
            out[out.get_global_var(group.name)] = ungroup(func)
    return out, sources, borrowed, +skipped  # unary + drops zero counts


OTHER_TARGET, OTHER_TVM = "tuned for another target", "measured with another TVM release"
NO_REPLAY = "whose trace does not replay on this model's group"


def _replayed(mod: IRModule, record: Any, skipped: Counter) -> Any | None:
    """The record's schedule of ``mod``; None (counted into ``skipped``) where its trace no longer replays (a
    block it names is not there): the group gets a default schedule, the model still compiles."""
    try:
        return schedule_from_record(mod, record)
    except (RuntimeError, ValueError) as err:  # TVM's ScheduleError is a RuntimeError
        log.warning("record %s of task %s does not replay: %s", record.record_id, record.task_key[:12],
                    str(err).splitlines()[0][:200] if str(err) else type(err).__name__)
        skipped[NO_REPLAY] += 1
        return None


def same_groups(groups: list[Any], others: list[Any]) -> dict[str, IRModule]:
    """Each group -> the module of the group of ``others`` in the same place in the graph (the same model at
    other sizes): the k-th group whose name is the same but for its numbers (which differ between sizes:
    ``matmul1`` here is ``matmul2`` there), in order of first call, pairs with the k-th such group there."""
    def places(gs: list[Any]) -> list[tuple[str, int]]:
        seen: Counter = Counter()
        out = []
        for g in gs:
            stem = re.sub(r"\d+", "", g.name)
            out.append((stem, seen[stem]))
            seen[stem] += 1
        return out

    theirs = {place: g for place, g in zip(places(others), others, strict=True)}
    return {g.name: group_module(theirs[place].func)
            for place, g in zip(places(groups), groups, strict=True) if place in theirs}


def _transferred(mod: IRModule, donor: IRModule, target: Target, db: Database | None,
                 alternatives: list[tuple[Target, int | None]], space_version: int) -> Any | None:
    """``mod`` scheduled like the best record of ``donor`` (the same group at other sizes): its untuned build
    where that won there, as the bucket has it; None if there is no record or it does not carry over."""
    best, _ = _best_of_alternatives(db, donor, alternatives, space_version, Counter())
    if best is None or best.space_version != space_version:
        return None
    if best.trace_json is None:
        return schedule_from_record(mod, best)
    try:
        trace = schedule_from_record(donor, best).trace
        return TraceSearchSpace(mod, target, settings_for(target)).transfer(trace)
    except (InvalidConfig, RuntimeError, ValueError):  # TVM's ScheduleError is a RuntimeError
        return None


def is_gpu(target: Target) -> bool:
    """A target whose kernels must be scheduled to build at all (threads bound): CUDA."""
    return target.kind.name == "cuda"


def dlight_schedules(mod: IRModule, target: Target, sources: dict[str, str]) -> IRModule:
    """``mod`` with TVM's dlight GPU rules applied to every PrimFunc not yet scheduled (dlight skips those marked
    ``tirx.is_scheduled``, as ``ungroup`` marks tuned and default schedules); groups in ``sources`` that were
    unscheduled and are now become ``DLIGHT`` there. ``mod`` itself is left as it was."""
    out = untuned(mod, target)
    names = {gv.name_hint for gv in out.get_global_vars()}
    for name, source in sources.items():
        if source == UNSCHEDULED and name in names and _is_scheduled(out[name]):
            sources[name] = DLIGHT
    return out


def _dlight_schedule(mod: IRModule, target: Target) -> Any | None:
    """A GPU group's PrimFunc as dlight's rules schedule it (the tuner's untuned baseline), None where none
    applies. On an H200, each of ResNet-18's 3x3 convolutions at 56x56 ran 1.07 ms with the search space's
    default schedule, while dlight's schedules of all 20 tasks together took 1.95 ms: a group with no record
    gets dlight's first."""
    try:
        func = untuned(mod, target)["main"]
    except Exception:  # noqa: BLE001 - a rule that fails on an unusual kernel: the default schedule instead
        return None
    return func if _is_scheduled(func) else None


def _is_scheduled(func: Any) -> bool:
    return isinstance(func, tirx.PrimFunc) and bool(func.attrs.get("tirx.is_scheduled", False))


def _records_of_other_targets(db: Database | None, usable: list[Target]) -> Counter:
    """Records of the tasks in ``db`` tuned for a target none of ``usable`` is (another CPU, another kind)."""
    if db is None:
        return Counter()
    mine = {target_json(t) for t in usable}
    return Counter({OTHER_TARGET: sum(db.n_measured(row.task_key) for row in db.tasks() if row.target not in mine)})


def _best_of_alternatives(db: Database | None, mod: IRModule, alternatives: list[tuple[Target, int | None]],
                          space_version: int, skipped: Counter, chosen: dict[str, Any] | None = None
                          ) -> tuple[Any | None, int | None]:
    """The best record of the first alternative target that has one, and that target's thread count (``chosen``,
    task key -> record, overrides the database for this target)."""
    if chosen and (record := chosen.get(task_key(mod, alternatives[0][0], space_version))) is not None:
        return record, None
    for candidate, threads in alternatives:
        best = _best_schedule_record(db, task_key(mod, candidate, space_version), target_json(candidate), skipped)
        if best is not None:
            return best, threads
    return None, None


def _best_schedule_record(db: Database | None, key: str, tjson: str, skipped: Counter) -> Any | None:
    """The record a model's end-to-end phase chose for the task (``Database.selected``), else its
    ``best_alone_record``."""
    from autosched._tvm import TVM_VERSION
    from autosched.session import same_release

    chosen = db.selected(key, tjson) if db is not None else None  # chosen inside the model: it comes first
    if chosen is not None and same_release(chosen.tvm_version, TVM_VERSION):
        return chosen
    return best_alone_record(db, key, tjson, skipped)


def best_alone_record(db: Database | None, key: str, tjson: str, skipped: Counter | None = None) -> Any | None:
    """The task's best record as timed alone, measured with this TVM release (others are counted into
    ``skipped``), unless nothing but its untuned baseline was measured (None then): a budget that ran out after
    the baselines must not leave the group unscheduled (the default schedule is 5-10x faster). Where a schedule
    was measured and the baseline still won (a tiny transpose), the baseline is the best record."""
    from autosched._tvm import TVM_VERSION
    from autosched.session import same_release

    skipped = Counter() if skipped is None else skipped
    best = db.best(key, tjson) if db is not None else None
    if best is None or (best.trace_json is not None and same_release(best.tvm_version, TVM_VERSION)):
        return best  # the common case: one query, no scan of the task's records
    stored = db.records(key)
    records = [r for r in stored if same_release(r.tvm_version, TVM_VERSION)]
    if not same_release(best.tvm_version, TVM_VERSION):
        skipped[OTHER_TVM] += len(stored) - len(records)
        best = min((r for r in records if r.status is Status.OK and r.latencies_s and r.target == tjson),
                   key=lambda r: r.latency_s, default=None)
    if best is None or best.trace_json is not None:
        return best
    scheduled = [r for r in records if r.trace_json is not None and r.status is Status.OK]
    return best if scheduled else None


@dataclass(frozen=True)
class OutputSpec:
    """One result of a model: its name, static shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


CUDA_GRAPH_CONFIG = "relax.backend.use_cuda_graph"  # TVM's pass config: capture kernel launches as CUDA graphs


@dataclass
class CompiledModel:
    """A built model: call it with numpy arrays, time it, or export it as a shared library."""

    executable: Any  # relax.VMExecutable, or a runtime module loaded from an exported library
    inputs: list[InputSpec]
    target: str  # target JSON
    sources: dict[str, str] = field(default_factory=dict)  # fusion group -> tuned | default | dlight | unscheduled
    borrowed: dict[str, int] = field(default_factory=dict)  # fusion group -> thread count its record was tuned at
    skipped: Counter = field(default_factory=Counter)  # why records were not applied -> how many
    entry: str = "main"
    precision: str = "fp32"  # autosched.graph.precision
    precision_error: float | None = None  # max relative error vs float32 on random inputs (low precision only)
    foreign: dict[str, str] = field(default_factory=dict)  # fusion group -> the other CPU its schedule was tuned on
    name: str = ""  # the model's
    outputs: list[OutputSpec] = field(default_factory=list)  # the entry function's results (empty: not known)
    keys: dict[str, str] = field(default_factory=dict)  # fusion group -> its task key for ``target`` (provenance)
    _vm_cache: Any = field(default=None, init=False, repr=False, compare=False)
    _caller_cache: Caller | None = field(default=None, init=False, repr=False, compare=False)

    def counts(self) -> Counter:
        return Counter(self.sources.values())

    @property
    def device(self) -> Any:
        """Where the model runs: GPU 0 for a CUDA build, else this CPU."""
        return device_of(self.target)

    @property
    def function(self) -> Any:
        """The VM's entry function itself: takes TVM tensors already on ``device``, no checks and no copies."""
        return self._vm()[self.entry]

    def _vm(self) -> Any:
        if self._vm_cache is None:
            built_for = Target(json.loads(self.target))
            if built_for.kind.name == "llvm":  # code for a CPU this one is not (SIGILL): one line instead
                require_runs_here(built_for, "this build")
            self._vm_cache = relax.VirtualMachine(self.executable, self.device)
        return self._vm_cache

    def _caller(self) -> Caller:
        if self._caller_cache is None:
            with _LAZY_LOCK:  # two threads' first calls make one VM and one caller
                if self._caller_cache is None:
                    self._caller_cache = Caller(self._vm()[self.entry], self.inputs, self.device)
        return self._caller_cache

    def __call__(self, *arrays: Any, out: Sequence[Any] | None = None) -> list[Any]:
        """Run the model: numpy arrays (or torch tensors, or anything with ``__dlpack__``) in, one array per
        output back (torch tensors for torch inputs), or written into ``out``. Aligned, contiguous inputs of
        the right dtype are not copied (``autosched.deploy.serving``)."""
        return self._caller()(arrays, out)

    def time(self, arrays: list[np.ndarray], n_threads: int, repeat: int = 5, min_repeat_ms: int = 200) -> list[float]:
        """The kernels' own time (TVM's timer on the VM, inputs already tensors on the model's device): seconds
        per inference, ``repeat`` samples, with ``n_threads`` TVM (CPU) threads. A call from Python adds
        ``Caller``'s overhead (and, on a GPU, the copies in and out)."""
        set_num_threads(n_threads)
        timer = self._vm().time_evaluator(self.entry, self.device, number=1, repeat=repeat,
                                          min_repeat_ms=min_repeat_ms)
        return list(timer(*self._device_args(arrays)).results)

    def kernel_timer(self, arrays: list[np.ndarray]) -> Callable[[], float]:
        """A callable that runs the model on ``arrays`` and returns one sample of its kernels' own time in seconds
        (TVM's timer, as ``time``): for timing the kernels in the same interleaved rounds as a Python call."""
        timer = self._vm().time_evaluator(self.entry, self.device, number=1, repeat=1, min_repeat_ms=0)
        args = self._device_args(arrays)
        return lambda: timer(*args).mean

    def _device_args(self, arrays: list[np.ndarray]) -> list[Any]:
        """``arrays`` as tensors on the model's device, after the same checks as a call."""
        self._caller()(arrays)
        return [tvm.runtime.tensor(np.ascontiguousarray(a, s.dtype), self.device)
                for s, a in zip(self.inputs, arrays, strict=True)]

    def export_library(self, path: str | Path) -> Path:
        """Write ``path`` (a shared library) and ``path.json`` (inputs, target, schedule sources)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        from autosched.targets import export_compiler

        fcompile = export_compiler(Target(json.loads(self.target)))  # another architecture's: its cross compiler
        self.executable.export_library(str(path), fcompile=fcompile)
        meta = {"inputs": [[s.name, list(s.shape), s.dtype] for s in self.inputs], "target": self.target,
                "sources": self.sources, "borrowed": self.borrowed, "entry": self.entry, "precision": self.precision,
                "precision_error": self.precision_error, "foreign": self.foreign, "name": self.name,
                "outputs": [[s.name, list(s.shape), s.dtype] for s in self.outputs], "keys": self.keys}
        Path(str(path) + ".json").write_text(json.dumps(meta, indent=1))
        return path


def compile_model(model: Model, target: Target, db: Database | None = None, default_schedules: bool = True,
                  fused: IRModule | None = None, on_progress: Callable[[str], None] | None = None,
                  donor: IRModule | None = None, cuda_graph: bool = False,
                  chosen: dict[str, Any] | None = None) -> CompiledModel:
    """Graph rewrites, the database's best schedules (default ones for the rest; on a GPU dlight's where there
    is neither), then TVM's build. ``fused``: the model already through ``rewrite`` for this target (saves doing
    it again). ``donor``: the same model at other sizes, through ``rewrite``: its groups' records are refitted
    to the groups here that have none (``apply_database``). ``cuda_graph`` (a GPU build): the VM captures the
    model's static-shape kernel launches as CUDA graphs on the first call and replays them after (TVM's
    ``RewriteCUDAGraph``), one launch instead of one per kernel. ``chosen``: task key -> the record to apply there
    instead of the database's (``apply_database``).
    ``on_progress(detail)``: how far it is, for a progress display."""
    fused = fused if fused is not None else rewrite(model.mod, target)
    say = on_progress or (lambda detail: None)
    donors = same_groups(fusion_groups(fused), fusion_groups(donor)) if donor is not None else None
    scheduled, sources, borrowed, skipped = apply_database(
        fused, target, db, default_schedules, lambda done, total: say(f"schedules of {done}/{total} fusion groups"),
        donors, chosen)
    foreign: dict[str, str] = {}
    if db is not None and not is_gpu(target):  # records of other CPUs, for groups with none of this one's
        from autosched.scheduler.foreign import adopt_foreign_schedules

        say("timing other CPUs' schedules here")
        adopted = adopt_foreign_schedules(fused, scheduled, sources, target, db, settings_for(target).version,
                                          (DEFAULT, UNSCHEDULED))
        foreign, skipped = adopted.taken, skipped + adopted.skipped
    say("TVM's build")
    final = run_passes(scheduled, target, FINISH_PASSES, model_name=model.name)
    if is_gpu(target):  # after the finish passes: any kernel they add is scheduled too
        final = dlight_schedules(final, target, sources)
    compiled = CompiledModel(_build(final, target, model.name, cuda_graph), model.inputs, target_json(target), sources,
                             borrowed, skipped, model.entry, precision_of(model.mod), foreign=foreign, name=model.name,
                             outputs=output_specs(model), keys=group_keys(fused, target))
    if compiled.precision != "fp32" and runs_here(target):  # for another CPU: measured where it runs
        say("accuracy against float32")
        compiled.precision_error = precision_error(model, compiled, target)
    return compiled


def output_specs(model: Model) -> list[OutputSpec]:
    """The model's results, name (the ONNX graph's output names; ``output0``, ... otherwise), shape and dtype, from
    its entry function's return type; [] where a shape is not static (a symbolic dimension)."""
    ret = model.mod[model.entry].ret_ty
    parts = list(ret.fields) if hasattr(ret, "fields") else [ret]
    names = model.info.get("output_names", [])  # an ONNX model's, read at import
    try:
        return [OutputSpec(names[i] if i < len(names) else f"output{i}", tuple(int(d) for d in t.shape.values),
                           str(t.dtype)) for i, t in enumerate(parts)]
    except (AttributeError, TypeError):  # a symbolic dimension, or not a tensor
        return []


def group_keys(fused: IRModule, target: Target) -> dict[str, str]:
    """Each fusion group's task key for ``target`` (the key its records are stored under)."""
    version = settings_for(target).version
    return {g.name: task_key(group_module(g.func), target, version) for g in fusion_groups(fused)}


def precision_error(model: Model, compiled: CompiledModel, target: Target, n_inputs: int = 3) -> float:
    """Max relative error of a low-precision build against float32 on ``n_inputs`` random inputs: ONNX
    Runtime's outputs for an ONNX model (where it is installed), else an untuned float32 build's."""
    from autosched.deploy.reference import max_relative_error

    inputs = [model.random_inputs(seed) for seed in range(n_inputs)]
    try:
        from autosched.deploy.reference import reference_session, run_onnxruntime

        session = reference_session(model, 1)
        want = [run_onnxruntime(session, model, x) for x in inputs]
    except UserInputError:  # not ONNX, or no onnxruntime
        fp32 = Model(model.name, with_precision(model.mod, "fp32"), model.inputs, model.source, entry=model.entry)
        reference = compile_unscheduled(fp32, target)
        want = [reference(*x) for x in inputs]
    return max(max_relative_error(compiled(*x), w) for x, w in zip(inputs, want, strict=True))


def _build(mod: IRModule, target: Target, model_name: str, cuda_graph: bool = False) -> Any:
    """TVM's build of the whole graph; a failure is one line naming the model and the operator."""
    try:
        if cuda_graph and is_gpu(target):
            with tvm.transform.PassContext(config={CUDA_GRAPH_CONFIG: True}):
                return tvm.compile(mod, target=target)
        return tvm.compile(mod, target=target)
    except Exception as err:  # TVM raises InternalError, TVMError, ValueError, ...
        raise GraphError(f"{model_name}: TVM's build failed on {failure_reason(err)}") from err


def compile_unscheduled(model: Model, target: Target, fused: IRModule | None = None) -> CompiledModel:
    """TVM's default build with no tuned schedules (the 'untuned' baseline): none at all on a CPU, dlight's
    on a GPU (where unscheduled kernels do not build)."""
    fused = fused if fused is not None else rewrite(model.mod, target)
    sources = {g.name: UNSCHEDULED for g in fusion_groups(fused)}
    if is_gpu(target):
        fused = dlight_schedules(fused, target, sources)
    return CompiledModel(_build(fused, target, model.name), model.inputs, target_json(target), sources,
                         entry=model.entry, name=model.name)


def load_library(path: str | Path, meta: dict[str, Any]) -> CompiledModel:
    """One library written by ``CompiledModel.export_library``, with ``meta`` its ``PATH.json``
    (``autosched.deploy.library.load_compiled`` reads any library, bucketed ones too)."""
    path = Path(path)
    inputs = [InputSpec(name, tuple(shape), dtype) for name, shape, dtype in meta["inputs"]]
    return CompiledModel(_load_library(path, meta["target"]), inputs, meta["target"], meta.get("sources", {}),
                         meta.get("borrowed", {}), entry=meta.get("entry", "main"),
                         precision=meta.get("precision", "fp32"), precision_error=meta.get("precision_error"),
                         foreign=meta.get("foreign", {}), name=meta.get("name", ""),
                         outputs=[OutputSpec(n, tuple(shape), dtype) for n, shape, dtype in meta.get("outputs", [])],
                         keys=meta.get("keys", {}))


def _load_library(path: Path, target: str) -> Any:
    """TVM's load of an exported library; a GPU build where TVM has no runtime for that GPU is one line."""
    try:
        return tvm.runtime.load_module(str(path))
    except RuntimeError as err:
        if device_of(target) != tvm.cuda(0) or "loader" not in str(err):
            raise
        raise UserInputError(f"{path} is a CUDA build: loading it needs TVM's CUDA runtime, which needs the CUDA "
                             "driver (libcuda.so.1), not found on this machine") from err
