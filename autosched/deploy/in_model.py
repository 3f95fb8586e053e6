"""The end-to-end phase of a model's tuning: its heaviest tasks' best few schedules timed inside the model.

The search times each candidate alone, many runs in a row, its weights and inputs hot in cache. Inside the model
a kernel finds its weights out of the caches (the other layers went through them since its last call), reads
what the previous kernel just wrote, partitioned across the cores as that kernel wrote it, and the fastest schedule
alone is not always the fastest there (a segmentation UNet's 3x3 convolution: 0.33 ms alone and 1.44 ms in the
model with one schedule, 0.38 and 0.79 with another). So the run ends with this phase:

1. the model is built with the combination the database held before this run (each task's schedule chosen inside
   the model by an earlier run, else its best record from before this run; new tasks their best);
2. inside that model, each of its heaviest tasks runs its few best schedules (as timed alone) in turn: the VM's
   instrument hook makes the call itself, with the model's kernel or another schedule's (its weights laid out as
   that schedule reads them), so every variant runs in the model's own data flow (``worker.time_in_model``);
3. each task takes the variant with the lowest time inside the model; the model is built with those (and every
   other task's best), and the two builds are timed whole, interleaved; the faster one's schedules are stored as
   the tasks' selections (``Database.select``), which ``compile`` applies before any record's alone time.

So more tuning never leaves the model slower than the database had it (within the timer's noise), and the run
reports the model's own latency beside the estimate from kernels timed alone. CPU builds on this machine only (not
over RPC, not on a GPU); a failure here is logged and leaves the database as the search left it.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosched._tvm import relax, save_json, tvm
from autosched.apply import schedule_from_record
from autosched.db import Database, Selection
from autosched.deploy.profiling import PREPACKED
from autosched.measure import worker
from autosched.measure.local import isolated
from autosched.records import Candidate, Status, TuningRecord, schedule_key
from autosched.scheduler.task_scheduler import INF, TaskState
from autosched.scratch import scratch_dir
from autosched.tune import NO_DEADLINE, Deadline

log = logging.getLogger("autosched.deploy.in_model")

MAX_TASKS = 12  # tasks whose schedules are timed inside the model: the heaviest there, by their time in it ...
COVERED_SHARE = 0.9  # ... until they cover this share of the kernels' time
MAX_ALONE_RATIO = 1.25  # a variant whose time alone is above this times the model's own kernel's time inside the
# model is not tried there (inside, a kernel is rarely faster than alone)
ROUNDS_PER_VARIANT = 7  # inferences each variant runs in (its median counts)
NOISE = 0.02  # a variant, or a whole build, must be this much faster than what the database had to replace it
WHOLE_ROUNDS = 9  # interleaved rounds of the two builds' whole inference
PROFILE_RUNS = 5  # inferences of the model as the database had it, each kernel timed inside it


@dataclass
class InModelResult:
    """What the end-to-end phase measured and kept."""

    before_s: float  # the model's latency (its kernels and the VM, TVM's timer) as the database had it
    new_s: float  # ... with the new combination (each heavy task's fastest in the model, the others' best alone)
    kept_new: bool  # the new combination measured faster and is stored
    changed: list[str] = field(default_factory=list)  # tasks whose in-model choice is not their best alone
    in_model_s: dict[str, float] = field(default_factory=dict)  # task key -> seconds per inference in the model
    alone_s: dict[str, float] = field(default_factory=dict)  # ... and as timed alone (weight x best)
    elapsed_s: float = 0.0
    n_timed: int = 0  # tasks whose schedules were timed inside the model (the heaviest)
    stored: bool = True  # the kept combination is stored as the tasks' selections (False: out of time, the model
    # was only timed as the database has it)

    @property
    def model_s(self) -> float:
        """The model's latency with the combination kept."""
        return self.new_s if self.kept_new else self.before_s


def expected_cost_s(n_groups: int, n_variants: int = 2) -> float:
    """A rough bound of the phase's seconds: two builds of the model (0.1-0.25 s per fusion group each on two
    cores, more on a loaded machine) and, with more than one variant per task, the variants' builds and timing."""
    return 10.0 + 0.5 * n_groups if n_variants > 1 else 5.0 + 0.3 * n_groups


def tune_in_model(session: Any, model: Any, fused: Any, states: list[TaskState], db: Database, run_started: float,
                  deadline: Deadline = NO_DEADLINE, report: Callable[[str], None] = lambda _: None,
                  n_variants: int | None = None) -> InModelResult | None:
    """The phase (module docstring) for a model tuned on this CPU, ``run_started`` the wall-clock time (epoch
    seconds) the run began; None where there is nothing to choose, or time is short (nothing stored then).
    ``n_variants`` (default ``config.in_model``): schedules per heavy task; 1 only guards: the new best schedules
    against the database's, whole model."""
    n_variants = session.config.in_model if n_variants is None else n_variants
    from autosched.deploy.build import compile_model

    started = time.perf_counter()
    tasks = {s.task.key: s.task for s in states}
    before = {key: rec for key, task in tasks.items() if (rec := _before_run(db, task, run_started)) is not None}
    best = {key: rec for key, task in tasks.items() if (rec := _best(db, task)) is not None}  # read once: nothing
    # is written to the database before the phase's end
    if not _differs(before, best) and not any(len(_variants(db, t, before.get(k), 2, INF)) > 1
                                                   for k, t in tasks.items()):
        return None  # one schedule per task to choose from, and the database's already: nothing to time
    target = states[0].task.target
    timeout_s = 120.0 + 10 * session.config.run_timeout_s
    with scratch_dir("in-model") as tmp, \
            isolated(timeout_s, session.config.threads) as call:  # a crash or hang costs the phase, not the run
        report("in-model: the model as the database had it")
        incumbent = compile_model(model, target, db, fused=fused, chosen=before)
        build_s = time.perf_counter() - started
        paths = {"model": _export(incumbent, tmp, "before"), "io": os.path.join(tmp, "io.npz")}
        inputs = model.random_inputs(session.config.seed)
        worker.save_io(paths["io"], {f"in{i}": a for i, a in enumerate(inputs)})
        profile = _task_profile(call(worker.profile_model, paths["model"], incumbent.entry, paths["io"],
                                     PROFILE_RUNS), incumbent.keys)
        variants = {key: _variants(db, tasks[key], before.get(key), n_variants,
                                   MAX_ALONE_RATIO * profile[key] / tasks[key].weight)
                    for key in _heaviest(profile) if key in tasks}
        variants = {key: v for key, v in variants.items() if len(v) > 1}
        chosen, in_model = {}, dict(profile)
        if variants and deadline.allows(3 * build_s):
            report(f"in-model: {sum(map(len, variants.values()))} schedules of {len(variants)} tasks in the model")
            timed = _time_variants(session, call, tasks, variants, incumbent, fused, paths, tmp)
            for key, (rec, seconds) in timed.items():
                chosen[key], in_model[key] = rec, seconds
        new = {**best, **chosen}
        if not deadline.allows(1.5 * build_s):
            log.info("%s: no time left to build and time the in-model choice; nothing stored", model.name)
            (alone,) = call(worker.time_models, [paths["model"]], model.entry, paths["io"], WHOLE_ROUNDS, 50)
            seconds = float(statistics.median(alone))
            return InModelResult(seconds, seconds, False, in_model_s=profile, elapsed_s=time.perf_counter() - started,
                                 stored=False)
        report("in-model: the new schedules against the database's, whole model")
        candidate = compile_model(model, target, db, fused=fused, chosen=new)
        before_rounds, new_rounds = call(
            worker.time_models, [paths["model"], _export(candidate, tmp, "new")], model.entry, paths["io"],
            WHOLE_ROUNDS, 50)
    before_s, new_s = float(statistics.median(before_rounds)), float(statistics.median(new_rounds))
    kept_new = new_s < before_s * (1 - NOISE / 2)
    kept = new if kept_new else {**best, **before}
    model_s, in_model = (new_s, in_model) if kept_new else (before_s, profile)
    db.select([Selection(k, rec.target, rec.record_id, model.name, in_model.get(k), model_s)
               for k, rec in kept.items() if rec.record_id is not None])
    changed = [tasks[k].name for k, rec in kept.items() if rec.record_id != getattr(best.get(k), "record_id", None)]
    alone = {s.task.key: s.contribution_s for s in states}
    return InModelResult(before_s, new_s, kept_new, changed, in_model, alone, time.perf_counter() - started,
                         len(chosen))


def _before_run(db: Database, task: Any, run_started: float) -> TuningRecord | None:
    """What compile applied to the task before this run: its in-model choice, else its best record from before."""
    chosen = db.selected(task.key, task.target_json)
    if chosen is not None:
        return chosen
    older = [r for r in _ok(db, task) if r.created_at < run_started]
    if not any(r.trace_json is not None for r in older):
        return None  # its untuned baseline alone (or nothing): compile gave it its default schedule
    return min(older, key=lambda r: r.latency_s)


def _best(db: Database, task: Any) -> TuningRecord | None:
    """What compile applies to the task without a selection: its best record alone (None: its default schedule,
    where nothing but the untuned baseline was measured)."""
    from autosched.deploy.build import best_alone_record

    return best_alone_record(db, task.key, task.target_json)


def _ok(db: Database, task: Any) -> list[TuningRecord]:
    return [r for r in db.records(task.key) if r.status is Status.OK and r.latencies_s and r.target == task.target_json]


def _differs(before: dict[str, TuningRecord], best: dict[str, TuningRecord]) -> bool:
    """Whether the search changed any task's best since the combination the database had."""
    return any(k not in before or before[k].record_id != b.record_id for k, b in best.items())


def _task_profile(by_symbol: dict[str, float], keys: dict[str, str]) -> dict[str, float]:
    """Task key -> seconds per inference of its kernels inside the model, from the VM's symbols (a group's kernel
    is ``<group>`` or ``<group>_prepacked``; ``keys``: group -> task key)."""
    out: dict[str, float] = {}
    for symbol, seconds in by_symbol.items():
        key = keys.get(symbol, keys.get(symbol.removesuffix(PREPACKED)))
        if key is not None:
            out[key] = out.get(key, 0.0) + seconds
    return out


def _heaviest(in_model_s: dict[str, float]) -> list[str]:
    """The tasks with the largest share of the model's kernel time, until they cover ``COVERED_SHARE`` (at most
    ``MAX_TASKS``)."""
    ranked = sorted(in_model_s, key=lambda k: -in_model_s[k])
    total, covered, out = sum(in_model_s.values()) or 1.0, 0.0, []
    for key in ranked[:MAX_TASKS]:
        if covered >= COVERED_SHARE * total:
            break
        out.append(key)
        covered += in_model_s[key]
    return out


def _variants(db: Database, task: Any, before: TuningRecord | None, n: int, limit_s: float) -> list[TuningRecord]:
    """The schedules to time inside the model: what the database had (first), then the fastest distinct ones as
    timed alone, ``n`` in all, none slower alone than ``limit_s``."""
    out, seen = ([before], {schedule_key(before.decisions)}) if before is not None else ([], set())
    for rec in sorted(_ok(db, task), key=lambda r: r.latency_s):
        if len(out) >= n or rec.latency_s > limit_s:
            break
        if schedule_key(rec.decisions) not in seen:
            out.append(rec)
            seen.add(schedule_key(rec.decisions))
    return out


def _time_variants(session: Any, call: Callable, tasks: dict[str, Any], variants: dict[str, list[TuningRecord]],
                   incumbent: Any, fused: Any, paths: dict[str, str], tmp: str
                   ) -> dict[str, tuple[TuningRecord, float]]:
    """Each task -> (its variant fastest inside the model, that variant's seconds per inference there); the
    incumbent's own schedule for a task is its variant 0 (what the model was built with)."""
    out = {}
    for key, medians in variant_times(session, call, tasks, variants, incumbent, fused, paths, tmp).items():
        pick = int(np.argmin(medians))
        if medians[pick] >= medians[0] * (1 - NOISE):
            pick = 0  # not clearly faster than what the model has: keep it
        out[key] = (variants[key][pick], float(medians[pick]))
    return out


def variant_times(session: Any, call: Callable, tasks: dict[str, Any], variants: dict[str, list[TuningRecord]],
                  incumbent: Any, fused: Any, paths: dict[str, str], tmp: str) -> dict[str, list[float]]:
    """Each task -> the median seconds per inference inside the model of each of its ``variants`` (the first:
    the incumbent's own, as built; inf: left out, its outputs differed); ``call`` runs a function in the
    phase's worker; ``paths``: the incumbent's library ("model") and the model's inputs ("io")."""
    sites = call_sites(fused, incumbent.entry)
    symbols = {name: key for name, key in incumbent.keys.items() if key in variants}
    plan, constants, libraries = {}, {}, {}
    for name, key in symbols.items():
        builds = _build_variants(session, tasks[key], variants[key][1:])
        if builds is None or name not in sites:
            continue
        symbol = name  # the worker also finds it as name + "_prepacked" (weights laid out at build time)
        positions = [sorted(consts) for consts in sites[name]]
        if not all(set(b["prepacked"]) <= set(positions[0]) for b in builds if b["prepacked"] is not None):
            continue  # a weight laid out that the call does not pass as a constant: not timed in the model
        plan[symbol] = {"variants": [b["path"] for b in builds], "calls": positions}
        for i, consts in enumerate(sites[name]):
            constants.update({f"{symbol}|{i}|{p}": a for p, a in consts.items()})
        libraries[symbol] = key
    if not plan:
        return {}
    plan_path, const_path = os.path.join(tmp, "plan.json"), os.path.join(tmp, "constants.npz")
    worker.save_io(const_path, constants)
    with open(plan_path, "w") as f:
        json.dump({**plan, "constants": const_path}, f)
    n_rounds = ROUNDS_PER_VARIANT * max(len(v["variants"]) + 1 for v in plan.values())
    samples = call(worker.time_in_model, paths["model"], incumbent.entry, paths["io"], plan_path, n_rounds,
                   session.config.seed)
    return {libraries[symbol]: [float(statistics.median(s)) if s else INF for s in per_variant]
            for symbol, per_variant in samples.items()}


def _build_variants(session: Any, task: Any, records: list[TuningRecord]) -> list[dict] | None:
    """Each record's schedule of ``task`` built as a kernel library (what the search measured): [{"path", and
    "prepacked": the weight positions its own prepacking lays out, or None}]; None if any fails to build."""
    cands = [Candidate(task.key, r.params, r.decisions, r.trace_json,
                       mod_json=save_json(schedule_from_record(task.mod, r).mod)) for r in records]
    builds = session.builder.build(cands)
    if any(b.status is not Status.OK for b in builds):
        log.info("%s: a variant did not build again; not timed in the model", task.name)
        return None
    out = []
    for b in builds:
        spec = worker._timed_spec(b.artifact_path)
        out.append({"path": b.artifact_path, "prepacked": spec["prepacked"] if spec else None})
    return out


def call_sites(fused: Any, entry: str = "main") -> dict[str, list[dict[int, np.ndarray]]]:
    """Each fusion group -> per call of the ``entry`` function in the model's order, its constant arguments
    (position -> array): the weights the variants of its kernel are given (laid out their own way)."""
    out: dict[str, list[dict[int, np.ndarray]]] = {}
    bound: dict[Any, Any] = {}
    for block in fused[entry].body.blocks:
        for binding in block.bindings:
            value = bound[binding.var] = binding.value
            if not isinstance(value, relax.Call) or getattr(value.op, "name", None) != "relax.call_tir":
                continue
            args = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else [value.args[1]]
            args = [bound.get(a, a) if isinstance(a, relax.Var) else a for a in args]
            consts = {i: a.value.numpy() for i, a in enumerate(args) if isinstance(a, tvm.ir.GenericConst)}
            out.setdefault(value.args[0].name_hint, []).append(consts)
    return out


def _export(compiled: Any, folder: str, name: str) -> str:
    path = os.path.join(folder, f"{name}.so")
    compiled.executable.export_library(path)
    return path


