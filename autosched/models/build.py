"""Inference from the database: build a model with the best record of every tuned fusion group.

The same ``GRAPH_PASSES`` as at tuning time produce the groups, so each tuned task is found again by key.
Groups without a record get a default schedule (the search space's own design decisions), or stay
unscheduled where even that is illegal.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosched._tvm import IRModule, Target, cpu_device, relax, set_num_threads, tvm
from autosched.apply import schedule_from_record
from autosched.db import Database
from autosched.errors import GraphError, UserInputError
from autosched.models.frontends import InputSpec, Model
from autosched.models.graph import (
    FINISH_PASSES,
    failure_reason,
    fusion_groups,
    group_module,
    rewrite,
    run_passes,
    ungroup,
)
from autosched.records import Status
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import target_json, task_key

TUNED, DEFAULT, UNSCHEDULED = "tuned", "default", "unscheduled"


def default_schedule(mod: IRModule, target: Target) -> Any | None:
    """The first design whose own decisions, postprocessed, are a legal schedule; None if none is."""
    try:
        found = TraceSearchSpace(mod, target, settings_for(target)).default_schedule()
    except (RuntimeError, ValueError):
        return None
    return found[1] if found else None


def apply_database(fused: IRModule, target: Target, db: Database | None,
                   default: bool = True) -> tuple[IRModule, dict[str, str]]:
    """Replace every fusion group by its best stored schedule (else a default one). Returns (module, sources)."""
    out = IRModule(fused.functions, attrs=fused.attrs) if fused.attrs else IRModule(fused.functions)
    space_version, tjson = settings_for(target).version, target_json(target)
    sources: dict[str, str] = {}
    for group in fusion_groups(fused):
        mod = group_module(group.func)
        best = _best_schedule_record(db, task_key(mod, target, space_version), tjson)
        sch = schedule_from_record(mod, best) if best is not None else (
            default_schedule(mod, target) if default else None)
        sources[group.name] = TUNED if best is not None else (DEFAULT if sch is not None else UNSCHEDULED)
        if sch is not None:
            out[out.get_global_var(group.name)] = ungroup(sch.mod["main"])
    return out, sources


def _best_schedule_record(db: Database | None, key: str, tjson: str) -> Any | None:
    """The task's best record, unless nothing but its untuned baseline was measured: a budget that ran out
    after the baselines must not leave the group unscheduled (the default schedule is 5-10x faster). Where a
    schedule was measured and the baseline still won (a tiny transpose), the baseline is the best record."""
    best = db.best(key, tjson) if db is not None else None
    if best is None or best.trace_json is not None:
        return best
    scheduled = [r for r in db.records(key) if r.trace_json is not None and r.status is Status.OK]
    return best if scheduled else None


def _as_arrays(result: Any) -> list[np.ndarray]:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [a for item in result for a in _as_arrays(item)]


@dataclass
class CompiledModel:
    """A built model: call it with numpy arrays, time it, or export it as a shared library."""

    executable: Any  # relax.VMExecutable, or a runtime module loaded from an exported library
    inputs: list[InputSpec]
    target: str  # target JSON
    sources: dict[str, str] = field(default_factory=dict)  # fusion group -> tuned | default | unscheduled
    entry: str = "main"
    _vm_cache: Any = field(default=None, init=False, repr=False, compare=False)

    def counts(self) -> Counter:
        return Counter(self.sources.values())

    def _vm(self) -> Any:
        if self._vm_cache is None:
            self._vm_cache = relax.VirtualMachine(self.executable, cpu_device())
        return self._vm_cache

    def _check(self, arrays: tuple[np.ndarray, ...]) -> list[Any]:
        if len(arrays) != len(self.inputs):
            raise UserInputError(f"the model takes {len(self.inputs)} inputs "
                                 f"({', '.join(s.name for s in self.inputs)}), got {len(arrays)}")
        for spec, a in zip(self.inputs, arrays, strict=True):
            if tuple(a.shape) != spec.shape:
                raise UserInputError(f"input {spec.name!r} must have shape {spec.shape}, got {tuple(a.shape)}")
        return [tvm.runtime.tensor(np.ascontiguousarray(a, spec.dtype), cpu_device())
                for spec, a in zip(self.inputs, arrays, strict=True)]

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return _as_arrays(self._vm()[self.entry](*self._check(arrays)))

    def time(self, arrays: list[np.ndarray], n_threads: int, repeat: int = 5, min_repeat_ms: int = 200) -> list[float]:
        """Seconds per inference, ``repeat`` samples, with ``n_threads`` TVM threads."""
        set_num_threads(n_threads)
        timer = self._vm().time_evaluator(self.entry, cpu_device(), number=1, repeat=repeat,
                                          min_repeat_ms=min_repeat_ms)
        return list(timer(*self._check(tuple(arrays))).results)

    def export_library(self, path: str | Path) -> Path:
        """Write ``path`` (a shared library) and ``path.json`` (inputs, target, schedule sources)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.executable.export_library(str(path))
        meta = {"inputs": [[s.name, list(s.shape), s.dtype] for s in self.inputs], "target": self.target,
                "sources": self.sources, "entry": self.entry}
        Path(str(path) + ".json").write_text(json.dumps(meta, indent=1))
        return path


def compile_model(model: Model, target: Target, db: Database | None = None, default_schedules: bool = True,
                  fused: IRModule | None = None) -> CompiledModel:
    """Graph rewrites, the database's best schedules (default ones for the rest), then TVM's build.
    ``fused``: the model already through ``rewrite`` for this target (saves doing it again)."""
    fused = fused if fused is not None else rewrite(model.mod, target)
    scheduled, sources = apply_database(fused, target, db, default_schedules)
    final = run_passes(scheduled, target, FINISH_PASSES, model_name=model.name)
    return CompiledModel(_build(final, target, model.name), model.inputs, target_json(target), sources, model.entry)


def _build(mod: IRModule, target: Target, model_name: str) -> Any:
    """TVM's build of the whole graph; a failure is one line naming the model and the operator."""
    try:
        return tvm.compile(mod, target=target)
    except Exception as err:  # TVM raises InternalError, TVMError, ValueError, ...
        raise GraphError(f"{model_name}: TVM's build failed on {failure_reason(err)}") from err


def compile_unscheduled(model: Model, target: Target, fused: IRModule | None = None) -> CompiledModel:
    """TVM's default CPU build with no schedules at all (the 'untuned' baseline)."""
    fused = fused if fused is not None else rewrite(model.mod, target)
    return CompiledModel(_build(fused, target, model.name), model.inputs, target_json(target),
                         {g.name: UNSCHEDULED for g in fusion_groups(fused)}, model.entry)


def load_compiled(path: str | Path) -> CompiledModel:
    """Load a library written by ``CompiledModel.export_library`` (or ``autosched compile -o``)."""
    path = Path(path)
    meta_path = Path(str(path) + ".json")
    if not path.exists() or not meta_path.exists():
        raise UserInputError(f"{path} (with {meta_path.name} beside it) does not exist: build it with "
                             "autosched compile MODEL --db DB -o PATH")
    meta = json.loads(meta_path.read_text())
    inputs = [InputSpec(name, tuple(shape), dtype) for name, shape, dtype in meta["inputs"]]
    return CompiledModel(tvm.runtime.load_module(str(path)), inputs, meta["target"], meta.get("sources", {}),
                         meta.get("entry", "main"))
