"""What a task's search starts from (queued as its first candidates): its own best schedules at another thread
count or on another CPU, micro-kernel-shaped settings, the refitted bests of the model's tasks like it, and, before
each round, its siblings' (same knobs) bests."""

from __future__ import annotations

import math

from autosched.db import Database
from autosched.errors import InvalidConfig
from autosched.records import Status
from autosched.search.base import SearchStrategy
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import Task


def flops_distance(a: float, b: float) -> float:
    """How far apart two tasks' FLOPs are: the absolute log ratio."""
    return abs(math.log(max(a, 1.0) / max(b, 1.0)))


def nearest_in_flops(task: Task, tasks: dict[str, Task], keys) -> list[str]:
    """``keys`` of ``tasks``, nearest to ``task`` in FLOPs (log ratio) first; ties keep their order."""
    return sorted(keys, key=lambda key: flops_distance(tasks[key].flops, task.flops))


SIBLING_PROPOSALS_PER_ROUND = 2  # siblings' bests queued before a task's round (of ``TaskScheduler.round_trials``)


def share_sibling_bests(task: Task, strategies: dict, tasks: dict[str, Task], db: Database,
                        k: int = SIBLING_PROPOSALS_PER_ROUND) -> int:
    """Tasks with the same knobs (one convolution with different epilogues, one matmul in every shape bucket)
    try each other's best schedule, fitted to their own ranges: the siblings nearest in FLOPs first, at most
    ``k`` new settings before each of the task's rounds (a model's twenty convolutions, each queueing its new
    best every round, would fill the rounds and crowd the model-screened picks out). Returns how many were
    queued (a setting already queued or measured is not queued again)."""
    own = strategies[task.key]
    siblings = nearest_in_flops(task, tasks, (key for key, other in strategies.items()
                                              if key != task.key and own.space_signature is not None
                                              and other.space_signature == own.space_signature))
    queued = 0
    for key in siblings:
        if queued >= k:
            break
        best = db.best(key, tasks[key].target_json)
        if best is not None and best.trace_json is not None:  # not a baseline record
            fitted = own.fitted(best.params)
            if fitted is not None and own.propose(fitted):
                queued += 1
    return queued


def start_from_other_thread_counts(task: Task, strategy: SearchStrategy, db: Database, k: int = 4) -> int:
    """The same task tuned for this CPU at another thread count (a model tuned at 2 threads, now at 1), else on
    another CPU of this architecture (a shipped log): the ``k`` best schedules of the nearest such target replay
    here (only their parallel split, tiles or vector width were tuned for another), so they are queued as this
    search's first candidates, measured here like any other. Returns how many were queued."""
    from autosched.targets import other_cpus, other_thread_counts
    from autosched.tasks import task_key

    known = [row.target for row in db.tasks()]
    others = [t for t, _ in other_thread_counts(task.target, known)] + other_cpus(task.target, known)
    for other_target in others:
        records = [r for r in db.records(task_key(task.mod, other_target, task.space_version))
                   if r.status is Status.OK and r.trace_json is not None]
        if not records:
            continue
        best = sorted(records, key=lambda r: r.latency_s)[:k]
        fitted = [p for p in (strategy.fitted(r.params) for r in best) if p is not None]
        for params in fitted:
            strategy.propose(params)
        return len(fitted)
    return 0


def start_from_microkernels(task: Task, strategy: SearchStrategy, k: int) -> int:
    """On a CPU, queue up to ``k`` micro-kernel-shaped settings of a float32 matmul or convolution
    (``microkernel_params``) as this search's first candidates. Returns how many were queued."""
    space = strategy.space
    if k <= 0 or not isinstance(space, TraceSearchSpace) or task.target.kind.name != "llvm":
        return 0
    from autosched._tvm import llvm_vector_bits
    from autosched.spaces.microkernel import microkernel_params

    return sum(strategy.propose(p) for p in microkernel_params(space, llvm_vector_bits(task.target), k))


def start_from_relatives(task: Task, strategy: SearchStrategy, strategies: dict, tasks: dict[str, Task], db: Database,
                         k: int) -> int:
    """Tasks of the model whose spaces share a design with this one at other sizes (convolutions of other
    channel counts, a matmul of other widths), among those searched so far: the best schedules of the ``k``
    nearest in FLOPs, refitted to this task (``TraceSearchSpace.transfer_params``), are queued as this search's
    first candidates. Returns how many were queued."""
    from autosched.apply import schedule_from_record

    def signatures(strategy: SearchStrategy) -> frozenset[str]:  # none for a space without designs (a test's fake)
        return getattr(strategy.space, "design_signatures", frozenset())

    mine = signatures(strategy) if k > 0 else frozenset()
    if not mine:
        return 0
    near = nearest_in_flops(task, tasks, (key for key, other in strategies.items()
                                          if key != task.key and mine & signatures(other)))
    queued = 0
    for key in near:
        best = db.best(key, tasks[key].target_json)
        if best is None or best.trace_json is None:  # nothing measured yet, or its untuned build won
            continue
        try:
            params = strategy.space.transfer_params(schedule_from_record(tasks[key].mod, best).trace)
        except (InvalidConfig, RuntimeError, ValueError):  # TVM's ScheduleError is a RuntimeError
            continue
        strategy.propose(params)
        queued += 1
        if queued == k:
            break
    return queued
