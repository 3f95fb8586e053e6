"""Records tuned on another CPU of this architecture (a shipped log, a database tuned elsewhere): used here only
where they measure faster here.

A record's schedule is a trace, not code: replayed on this machine's fusion group and built for this CPU's target,
it runs here whatever CPU it was tuned on. Whether it is any good here is another matter (its tiles were chosen for
another cache and vector width), so ``adopt_foreign_schedules`` times each such schedule beside what the group would
get without it (its default schedule, and the untuned build) on this CPU, checks its outputs against the untuned
build's, and keeps the fastest. Schedules that do not replay here, or that call tensor intrinsics of a CPU this one is
not (``Tensorize`` in the trace), are skipped and counted.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched._tvm import IRModule, Schedule, Target, cpu_device, save_json, set_num_threads, structural_hash, tvm
from autosched.apply import schedule_from_record
from autosched.db import Database
from autosched.graph.passes import fusion_groups, group_module, ungroup
from autosched.measure import worker
from autosched.records import Status, TuningRecord
from autosched.scratch import scratch_dir
from autosched.targets import other_cpus, runs_here, target_json
from autosched.tasks import task_key

log = logging.getLogger("autosched.foreign")

FOREIGN = "other CPU"  # a group's source: the best record of another CPU, faster here than what it had
NO_INTRINSICS = "tuned with tensor intrinsics of a CPU this one is not"
NOT_FASTER = "of another CPU, slower here than the group's default or untuned build"
NO_REPLAY = "of another CPU that do not replay on this model's groups"
N_REPEAT = 5
MIN_REPEAT_MS = 10
MAX_DONORS = 3  # other CPUs' schedules timed per group, nearest first


def _cpu_name(target: Target) -> str:
    """How a CPU target is named to the user: its ``mcpu`` and thread count."""
    return f"{target.attrs.get('mcpu', target.kind.name)} x{target.attrs.get('num-cores', '?')}"


@dataclass
class Adopted:
    """What ``adopt_foreign_schedules`` did: group -> the CPU (``mcpu``) whose record it took, why others were not
    taken -> how many groups."""

    taken: dict[str, str]
    skipped: Counter

    def summary(self) -> str:
        """One line: how many groups came from which CPU, and what was left out."""
        by_cpu = Counter(self.taken.values())
        line = ", ".join(f"{n} fusion group(s) from records tuned on {cpu}" for cpu, n in sorted(by_cpu.items()))
        rest = ", ".join(f"{n} {why}" for why, n in self.skipped.items())
        return "; ".join(part for part in (line and f"{line} (measured faster here)", rest and f"not taken: {rest}")
                         if part)


def replayable_bests(db: Database, mod: IRModule, donors: list[Target], space_version: int, skipped: Counter,
                     limit: int = MAX_DONORS) -> list[tuple[str, TuningRecord, Schedule]]:
    """The best scheduled record of each CPU of ``donors`` that tuned this group (``limit`` at most, nearest first),
    replayed on ``mod``: (that CPU's name, the record, the schedule). Records that call another CPU's tensor
    intrinsics, or whose trace no longer replays, are left out and counted into ``skipped``."""
    found: list[tuple[str, TuningRecord, Schedule]] = []
    for donor in donors:
        if len(found) == limit:
            break
        best = db.best(task_key(mod, donor, space_version), target_json(donor))
        if best is None or best.status is not Status.OK or best.trace_json is None:
            continue
        if '"Tensorize"' in json.dumps(best.trace_json) and not runs_here(donor):
            skipped[NO_INTRINSICS] += 1
            continue
        try:
            found.append((_cpu_name(donor), best, schedule_from_record(mod, best)))
        except (RuntimeError, ValueError) as err:  # TVM's ScheduleError is a RuntimeError
            log.info("record of %s does not replay here: %s", donor, str(err)[:200])
            skipped[NO_REPLAY] += 1
    return found


def adopt_foreign_schedules(fused: IRModule, scheduled: IRModule, sources: dict[str, str], target: Target,
                            db: Database | None, space_version: int, replaceable: tuple[str, ...]) -> Adopted:
    """For every group of ``fused`` whose source is one of ``replaceable`` (it has no record for this CPU) and that
    other CPUs of this architecture tuned: the best schedule of each (``MAX_DONORS`` at most) is timed here beside
    the group's untuned build and what ``scheduled`` gives it now (its default schedule, where it has one), outputs
    checked; the fastest of them replaces the group's function in ``scheduled`` (its source becomes ``FOREIGN``)
    where it beats both of the group's own."""
    adopted = Adopted({}, Counter())
    donors = other_cpus(target, [row.target for row in db.tasks()]) if db is not None else []
    if not donors or not runs_here(target):
        return adopted
    set_num_threads(int(target.attrs.get("num-cores", 1)))
    decided: dict[int, tuple[str, IRModule] | None] = {}  # a group's structural hash -> what its twin took
    for group in fusion_groups(fused):
        if sources.get(group.name) not in replaceable:
            continue
        mod = group_module(group.func)
        shape = structural_hash(mod)
        if shape in decided:  # a repeated layer: the same schedules, timed once
            if decided[shape] is not None:
                _take(adopted, scheduled, sources, group.name, *decided[shape])
            continue
        decided[shape] = None
        variants = {cpu: sch.mod for cpu, _, sch in replayable_bests(db, mod, donors, space_version, adopted.skipped)}
        if not variants:
            continue
        current = scheduled[scheduled.get_global_var(group.name)]
        own = {"untuned": mod, **({} if current.same_as(group.func) else {"current": group_module(current)})}
        times = time_here({**own, **variants}, target, group.n_outputs)
        timed = {name: t for name, t in times.items() if name in variants and t is not None}
        fastest_own = min((t for name, t in times.items() if name in own and t is not None), default=float("inf"))
        if not timed or min(timed.values()) >= fastest_own:
            adopted.skipped[NOT_FASTER] += 1
            continue
        cpu = min(timed, key=timed.__getitem__)
        decided[shape] = (cpu, variants[cpu])
        _take(adopted, scheduled, sources, group.name, cpu, variants[cpu])
    return adopted


def _take(adopted: Adopted, scheduled: IRModule, sources: dict[str, str], group: str, cpu: str,
          mod: IRModule) -> None:
    scheduled[scheduled.get_global_var(group)] = ungroup(mod["main"])
    sources[group] = FOREIGN
    adopted.taken[group] = cpu


FOREIGN_TIMEOUT_S = 60.0  # one variant's build and timing in the isolated worker: a hang costs this much, once


def time_here(variants: dict[str, IRModule], target: Target, n_outputs: int = 1,
              timeout_s: float = FOREIGN_TIMEOUT_S) -> dict[str, float | None]:
    """Median seconds of each variant of one group (``"untuned"`` first: the reference), built for ``target`` and
    run on this CPU; None for one that fails to build, to run, to finish within ``timeout_s`` or to match the
    untuned build's outputs. Each is built and timed in an isolated worker process, as a candidate is: a record that
    crashes or hangs there costs its own timing, never ``compile`` or the process it runs in."""
    from autosched.measure.local import isolated

    out: dict[str, float | None] = {}
    with scratch_dir("foreign") as tmp, isolated(timeout_s, int(target.attrs.get("num-cores", 1))) as call:
        io_path = os.path.join(tmp, "io.npz")
        for name, mod in variants.items():
            path = os.path.join(tmp, f"{len(out)}.so")
            try:
                out[name] = call(_time_variant, save_json(mod), target_json(target), path, io_path, n_outputs,
                                 not out)
            except Exception as err:  # noqa: BLE001 - build and run errors, crashes, timeouts: this variant only
                log.info("%s does not build or run here: %s", name, str(err).splitlines()[0][:200] if str(err) else err)
                out[name] = None
    return out


def _time_variant(mod_json: str, target_json_text: str, path: str, io_path: str, n_outputs: int,
                  is_reference: bool) -> float | None:
    """In the isolated worker: build one variant, make the reference inputs and outputs from it (the first, the
    untuned build) or check it against them, and time it: its median seconds, None where it is wrong."""
    worker.build(mod_json, target_json_text, path)
    lib = tvm.runtime.load_module(path)
    if is_reference:
        worker.save_io(io_path, _reference_io(lib, tvm.ir.load_json(mod_json), path, n_outputs))
    elif not os.path.exists(io_path):
        return None  # the untuned build failed: nothing to check against
    result = worker.measure(lib, cpu_device(), worker._load_io(io_path), n_outputs, worker._timed_spec(path),
                            N_REPEAT, MIN_REPEAT_MS, 1e-3, 1e-4)
    ok = result["status"] == "OK" and result["latencies_s"]
    return float(np.median(result["latencies_s"])) if ok else None


def _reference_io(lib: Any, mod: IRModule, path: str, n_outputs: int) -> dict[str, Any]:
    """Random inputs (integers zero: in range for any index) and the untuned build's outputs for them."""
    from autosched._tvm import arg_specs

    specs = arg_specs(mod["main"])
    rng = np.random.default_rng(0)
    io: dict[str, Any] = {}
    for i, (shape, dtype) in enumerate(specs[:-n_outputs]):
        floating = np.issubdtype(np.dtype(dtype), np.floating)
        io[f"in{i}"] = rng.standard_normal(shape).astype(dtype) if floating else np.zeros(shape, dtype)
    for i, (shape, dtype) in enumerate(specs[-n_outputs:]):
        io[f"shape_out{i}"], io[f"dtype_out{i}"] = np.array(shape, "int64"), np.array(dtype)
    outputs = worker.measure(lib, cpu_device(), io, n_outputs, worker._timed_spec(path), 1, 0, 0.0, 0.0,
                             check=False)["outputs"]
    io.update({f"out{i}": o for i, o in enumerate(outputs)})
    return io


__all__ = ["FOREIGN", "Adopted", "adopt_foreign_schedules", "replayable_bests", "time_here"]
