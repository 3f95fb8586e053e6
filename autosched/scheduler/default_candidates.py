"""The schedules a task's default measurement takes in (``measure_defaults``), before any search: what a task the
search never reaches runs. Its default schedule by rule, the other register tiles of a float32 micro-kernel, a serial
copy of a small function, other targets' best schedules of the same task (``borrowed_candidates``) and similar
tasks' best schedules refitted to it (``transferred_candidates``), each unless the database already has it."""

from __future__ import annotations

import logging
import re
from typing import Any

from autosched._tvm import as_python, save_json
from autosched.db import Database
from autosched.errors import InvalidConfig
from autosched.records import Candidate, schedule_key
from autosched.scheduler.search_seeds import flops_distance
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import Task

log = logging.getLogger("autosched.scheduler.default_candidates")


def default_candidates(task: Task, db: Database, seed: int, siblings: frozenset[str] = frozenset()
                       ) -> list[Candidate]:
    """The task's default schedule as a candidate (by rule: ``TraceSearchSpace.default_schedule``, what
    ``compile`` uses for a task without records), the other register tiles of a float32 matmul's or convolution's
    micro-kernel, unrolled differently (``OTHER_MICROKERNELS``: which is fastest depends on the shape, ShuffleNet's
    1x1 convolutions over 58 channels ran 16 GFLOPS in the first tile and 176 in the second), for a function small
    enough to run on one thread its serial copy (spaces/serial.py), the best schedules ``db`` holds of the same
    task for this CPU at the nearest other thread count and for other CPUs (``borrowed_candidates``), and the
    refitted best schedules of similar tasks in ``db`` other than ``siblings`` (the model's own tasks, whose bests
    the search shares: ``transferred_candidates``), each unless already in ``db``; none if the task has no design
    space."""
    try:
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target), seed=seed)
    except (RuntimeError, ValueError) as err:
        log.info("%s: no design space (%s): it stays unscheduled", task.name, err)
        return []
    measured = {schedule_key(r.decisions) for r in db.records(task.key)}
    cands = []
    for found in (space.default_schedule(), *other_microkernels(space), space.serial_default()):
        if found is not None:
            params, sch = found
            cand = Candidate(task.key, params, space.effective_decisions(sch),
                             as_python(sch.trace.as_json(remove_postproc=False)), save_json(sch.mod))
            if cand.dedup_key() not in measured and all(c.dedup_key() != cand.dedup_key() for c in cands):
                cands.append(cand)
    borrowed = borrowed_candidates(task, space, db) + transferred_candidates(task, space, db, siblings)
    return cands + [c for c in borrowed if c.dedup_key() not in measured]


MAX_TRANSFERRED = 2  # best schedules of similar tasks (other sizes, other models) measured with a task's defaults


def _stem(name: str) -> str:
    """A task's name without its numbers: ``fused_conv2d12_add6_relu61`` -> ``fused_conv2d_add_relu``."""
    return re.sub(r"\d+", "", name)


def transferred_candidates(task: Task, space: TraceSearchSpace, db: Database, siblings: frozenset[str] = frozenset(),
                           k: int = MAX_TRANSFERRED) -> list[Candidate]:
    """The best schedules of up to ``k`` tasks of the database like this one (the same operators at other sizes: the
    same name without its numbers, the same target and space version; other models' tasks, or this model's siblings
    already searched), nearest in FLOPs first, refitted to this task's sizes (``TraceSearchSpace.transfer_params``)
    and measured with its defaults: a task the search never reaches starts from what a similar task found. Tasks in
    ``siblings`` are not donors; donors whose best is their untuned build, or whose schedule does not fit this
    function, are skipped (at most ``2 k`` donors are tried: each costs a replay)."""
    from autosched._tvm import load_json
    from autosched.apply import schedule_from_record

    stem = _stem(task.name)
    donors = [row for row in db.tasks() if row.task_key != task.key and row.task_key not in siblings
              and row.target == task.target_json
              and row.space_version == task.space_version and _stem(row.name) == stem]
    donors.sort(key=lambda row: flops_distance(row.flops, task.flops))
    out: list[Candidate] = []
    for row in donors[:2 * k]:
        best = db.best(row.task_key, row.target)
        if best is None or best.trace_json is None:
            continue
        try:
            params = space.transfer_params(schedule_from_record(load_json(row.workload_json), best).trace)
            sch = space.apply(params)
        except (InvalidConfig, RuntimeError, ValueError):  # TVM's ScheduleError is a RuntimeError
            continue
        out.append(Candidate(task.key, params, space.effective_decisions(sch),
                             as_python(sch.trace.as_json(remove_postproc=False)), save_json(sch.mod)))
        if len(out) == k:
            break
    return out


# register tiles measured with a task's default besides its own (the 2nd and 3rd of ``microkernel_params``) and
# their unroll depths (cheap builds): MobileNetV2's 1x1 convolution from 144 to 24 channels ran 9.5 GFLOPS in every
# tile unrolled 64 or 512, and 39-48 in the third tile unrolled 16 or not at all (1 thread)
OTHER_MICROKERNELS = ((1, 64), (2, 16))


def other_microkernels(space: TraceSearchSpace) -> list[tuple[dict[str, Any], Any]]:
    """The ``OTHER_MICROKERNELS`` settings of a float32 matmul or convolution on a CPU (the default is the first
    tile), with their schedules; those the postprocessors reject, or that the shape makes equal to another, are
    left out."""
    if space.target.kind.name != "llvm" or not space.settings.rule_defaults:
        return []
    from autosched._tvm import llvm_vector_bits
    from autosched.spaces.microkernel import microkernel_params

    out = []
    for tile, unroll in OTHER_MICROKERNELS:
        tiles = microkernel_params(space, llvm_vector_bits(space.target), unroll=unroll)
        if tile >= len(tiles) or any(tiles[tile] == params for params, _ in out):
            continue
        try:
            out.append((tiles[tile], space.apply(tiles[tile])))
        except (InvalidConfig, RuntimeError, ValueError):
            continue
    return out


MAX_BORROWED = 3  # best schedules of other targets measured with a task's defaults: 1 thread count, 2 other CPUs


def borrowed_candidates(task: Task, space: TraceSearchSpace, db: Database) -> list[Candidate]:
    """The best schedule of this task tuned for this CPU at the nearest other thread count, and for each of the
    two nearest other CPUs of this architecture (a shipped log), replayed here: measured with the defaults, so a
    task the search never reaches still gets them where they are faster here (a budget too short to reach most
    tasks' searches left ResNet-18 at 3.8x ONNX Runtime's latency with Zen 5's log in the database, 1.5x with
    the log alone). Schedules that call another CPU's tensor intrinsics, or no longer replay, are left out."""
    from collections import Counter

    from autosched.scheduler.foreign import replayable_bests
    from autosched.targets import other_cpus, other_thread_counts

    known = [row.target for row in db.tasks()]
    others = [t for t, _ in other_thread_counts(task.target, known)][:1] + other_cpus(task.target, known)[:2]
    return [Candidate(task.key, dict(record.params), space.effective_decisions(sch),
                      as_python(sch.trace.as_json(remove_postproc=False)), save_json(sch.mod))
            for _, record, sch in replayable_bests(db, task.mod, others, task.space_version, Counter(), MAX_BORROWED)]
