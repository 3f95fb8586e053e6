"""Tune a whole model: its tasks share one trial budget and/or one time budget through the task scheduler.

The run goes: each task's untuned baseline (kept as a record); then every task's default schedule, measured
once (what ``compile`` applies to a task that was never searched: measured, so that it is used only where it
beats the baseline: an Inception-v3 pooling ran 25x slower on its first design's default than untuned), the
cheap tasks (``mark_cheap``) first, which keep it instead of a search (on a GPU only theirs: a group without a
record gets dlight's schedule, the baseline); then search rounds, each to the task the
scheduler expects to gain the most. A deadline is checked before each baseline, each batch of default
schedules, each round (the scheduler only starts one expected to end in time) and, in ``tune_task``, before
each batch of a round (a batch whose proposals took the time left is dropped). Everything measured is in
the database when it stops.

Many workers (processes or machines) can tune one model on one database: each step on a task (its baseline, its
default schedule, a round) is taken under the task's claim (``Database.leases``), so no two workers work on a
task at once; a worker skips the tasks others hold, waits when only those are left, and counts everyone's
measurements against the one budget.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autosched._tvm import as_python, save_json
from autosched.db import Database, Leases, TaskRow
from autosched.errors import InvalidConfig, ReferenceBuildError, UserInputError
from autosched.records import Candidate, Status, TuningRecord, schedule_key
from autosched.scheduler.task_scheduler import INF, TaskScheduler, TaskState, mark_cheap
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import device_kind
from autosched.tasks import Task
from autosched.tune import BASELINE_DECISIONS, NO_DEADLINE, Deadline, baseline_record, eta_s, to_record

log = logging.getLogger("autosched.scheduler.model_tuning")


@dataclass
class ModelProgress:
    n_done: int
    n_total: int | None  # None: no trial limit (a time budget only)
    estimated_s: float  # sum of weight x best latency over the tasks, now
    untuned_s: float  # the same sum for the default builds
    task_name: str
    elapsed_s: float
    n_done_at_start: int = 0
    time_left_s: float = INF  # until the deadline (inf: no time budget)

    @property
    def eta_s(self) -> float:
        """Seconds left: the time budget's, or the trial budget's at this run's pace, whichever ends first."""
        time_left = max(self.time_left_s, 0.0)
        if self.n_total is None:
            return time_left if time_left < INF else float("nan")
        by_trials = eta_s(self.elapsed_s, self.n_done - self.n_done_at_start, self.n_total - self.n_done)
        if by_trials != by_trials:  # no pace yet
            return time_left if time_left < INF else by_trials
        return min(by_trials, time_left)


@dataclass
class ModelTuneResult:
    states: list[TaskState]  # the tasks whose baseline was measured
    elapsed_s: float
    n_new: int  # measurements after the baselines (default schedules and search trials)
    unmeasured: list[Task] = field(default_factory=list)  # no baseline: out of time, or no reference build
    out_of_time: bool = False  # the time budget ended the run (not the trial budget or exhausted spaces)

    @property
    def untuned_s(self) -> float:
        return sum(s.task.weight * s.untuned_s for s in self.states if s.untuned_s < INF)

    @property
    def estimated_s(self) -> float:
        return sum(s.contribution_s for s in self.states)

    @property
    def n_tasks(self) -> int:
        return len(self.states) + len(self.unmeasured)

    @property
    def n_default(self) -> int:
        """Tasks kept on their default schedule (cheap: small share, cheap pattern)."""
        return sum(s.cheap for s in self.states)

    @property
    def n_tuned(self) -> int:
        """Tasks given to the search."""
        return len(self.states) - self.n_default


def _stored_baseline(task: Task, db: Database) -> TuningRecord | None:
    return next((r for r in db.records(task.key) if r.decisions == BASELINE_DECISIONS), None)


def measured_baseline(session, task: Task, db: Database) -> TuningRecord:
    """The task's default build, measured once and kept in the database as a record (so a tuned model never
    uses a schedule slower than no schedule, and a resumed run does not measure it again)."""
    if (rec := _stored_baseline(task, db)) is not None:
        return rec
    db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, save_json(task.mod),
                           task.flops, task.info))
    rec = baseline_record(task, session.measure_unscheduled(task))
    db.commit([rec])
    return rec


def _baseline_state(session, task: Task, db: Database, clock: Callable[[], float]) -> tuple[TaskState, float]:
    """The task's state once its baseline is measured, and the seconds that took (0: found in ``db``)."""
    before, n_before = clock(), db.n_measured(task.key)
    base = measured_baseline(session, task, db)
    best = db.best(task.key, task.target_json)
    state = TaskState(task, base.latency_s if base.status is Status.OK else INF, best.latency_s if best else INF,
                      db.n_measured(task.key))
    return state, clock() - before if state.n_trials > n_before else 0.0


def measure_baselines(session, tasks: list[Task], db: Database, deadline: Deadline,
                      report: Callable[[str], None]) -> list[TaskState]:
    """Each task's baseline in turn, while one more is expected to end before the deadline (at the median of
    this run's baselines, leaving out the first: it starts the worker processes). Baselines already in the
    database come first; one to measure is measured under the task's claim, and one another worker holds comes
    after the others: when its claim ends, or as soon as that worker has stored its baseline."""
    states: list[TaskState] = []
    timed: list[float] = []
    measured_any = False
    by_key = {t.key: t for t in tasks}
    in_db = [k for k, t in by_key.items() if _stored_baseline(t, db) is not None]  # read without a claim
    to_measure = [k for k in by_key if k not in in_db]
    stored = lambda key: _stored_baseline(by_key[key], db) is not None  # noqa: E731 - by another worker meanwhile
    with contextlib.closing(db.leases().in_turn(to_measure, deadline.left_s, stored)) as in_turn:
        for i, key in enumerate(itertools.chain(in_db, in_turn)):
            task = by_key[key]
            if not deadline.allows(statistics.median(timed) if timed else 0.0):
                log.info("time budget reached after %d of %d untuned baselines", i, len(tasks))
                break
            report(f"untuned build {i + 1}/{len(tasks)}: {task.name}")
            try:
                state, seconds = _baseline_state(session, task, db, deadline.clock)
            except ReferenceBuildError as err:  # one task without a reference is not tuned; the model goes on
                log.warning("%s: not tuned: %s", task.name, err)
                continue
            if seconds and measured_any:
                state.baseline_s = seconds
                timed.append(seconds)
            measured_any = measured_any or seconds > 0
            states.append(state)
    order = {key: i for i, key in enumerate(by_key)}
    return sorted(states, key=lambda s: order[s.task.key])


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


def measure_defaults(session, scheduler: TaskScheduler, db: Database, deadline: Deadline,
                     report: Callable[[str], None]) -> tuple[bool, int]:
    """Every task's default schedule (the cheap tasks' first; on a GPU only theirs), a batch at a time (each a
    trial of the budget), kept as records so ``compile`` uses the faster of the default schedule and the untuned
    build. Tasks other workers hold wait for a later batch; once only searched tasks are left and others hold
    them, they are left to the search. Returns False if time ran out, and how many this worker measured."""
    # cheap tasks first (stable: the scheduler's order otherwise); on a GPU only those: a group without a
    # schedule gets dlight's there, the baseline itself, so the default is left to the search
    todo = [s for s in sorted(scheduler.states, key=lambda s: not s.cheap)
            if s.cheap or device_kind(s.task.target) == "cpu"]
    started, n_batches, n_new = deadline.clock(), 0, 0
    leases = db.leases()
    while todo and scheduler.trials_left > 0:
        if not deadline.allows_another(started, n_batches):
            return False, n_new
        n = int(min(session.config.batch_size, scheduler.trials_left))
        batch: list[TaskState] = []
        for s in todo:  # the first n that no other worker holds
            if len(batch) < n and leases.try_hold(s.task.key):
                batch.append(s)
        if not batch:  # all held by other workers: look again soon, for a cheap task (no search will measure it)
            if not any(s.cheap for s in todo):
                break
            time.sleep(leases.poll_s)
            refresh(scheduler, db, leases)
            continue
        todo, n_batches = [s for s in todo if s not in batch], n_batches + 1
        try:
            n_new += _measure_defaults(session, batch, db, report, frozenset(s.task.key for s in scheduler.states))
        finally:
            for s in batch:
                leases.release(s.task.key)
        refresh(scheduler, db, leases)
    return True, n_new


SIBLING_PROPOSALS_PER_ROUND = 2  # siblings' bests queued before a task's round (of ``TaskScheduler.round_trials``)
DEFAULT_BUILD_PATIENCE = 4  # a default schedule may take this many times the search's build timeout to compile


def _measure_defaults(session, batch: list[TaskState], db: Database, report: Callable[[str], None],
                      siblings: frozenset[str] = frozenset()) -> int:
    """A batch's default schedules, built with ``DEFAULT_BUILD_PATIENCE`` times the usual limit: each is built
    once, and is what compile uses where the search found nothing better (an LSTM's 128-way concatenation,
    partitioned, compiles in ~3 s: at the search's 3 s it timed out and the group ran 80x slower untuned)."""
    cands = [(s, c) for s in batch for c in default_candidates(s.task, db, session.config.seed, siblings)]
    timeout_s = DEFAULT_BUILD_PATIENCE * session.config.build_timeout_for(session.device)
    builds = session.builder.build([c for _, c in cands], timeout_s=timeout_s) if cands else []
    for (s, cand), build in zip(cands, builds, strict=True):
        res = session.runner.run([build], session.prepare_io(s.task))[0]
        db.commit([to_record(s.task, cand, res)])
        s.n_trials, s.best_s = s.n_trials + 1, min(s.best_s, res.latency_s)
        report(f"default schedule: {s.task.name}")
    return len(cands)


def refresh(scheduler: TaskScheduler, db: Database, leases: Leases) -> set[str]:
    """Take in what other workers measured, and reserve the trials of their rounds in flight; returns the keys of
    this model's tasks they hold."""
    for s in scheduler.states:
        n = db.n_measured(s.task.key)
        if n != s.n_trials:
            best = db.best(s.task.key, s.task.target_json)
            scheduler.observe(s, n, best.latency_s if best else INF)
    others = leases.others()
    busy = {s.task.key for s in scheduler.states if s.task.key in others}
    scheduler.reserved = sum(others[key].n_trials for key in busy)
    return busy


def flops_distance(a: float, b: float) -> float:
    """How far apart two tasks' FLOPs are: the absolute log ratio."""
    return abs(math.log(max(a, 1.0) / max(b, 1.0)))


def nearest_in_flops(task: Task, tasks: dict[str, Task], keys) -> list[str]:
    """``keys`` of ``tasks``, nearest to ``task`` in FLOPs (log ratio) first; ties keep their order."""
    return sorted(keys, key=lambda key: flops_distance(tasks[key].flops, task.flops))


def share_sibling_bests(task: Task, strategies: dict, tasks: dict[str, Task], db: Database,
                        k: int = SIBLING_PROPOSALS_PER_ROUND) -> int:
    """Tasks with the same knobs (one convolution with different epilogues, one matmul in every shape bucket)
    try each other's best schedule, fitted to their own ranges: the siblings nearest in FLOPs first, at most
    ``k`` new settings before each of the task's rounds (a model's twenty convolutions, each queueing its new
    best every round, would fill the rounds and crowd the model-screened picks out). Returns how many were
    queued (a setting already queued or measured is not queued again)."""
    own = strategies[task.key]
    siblings = nearest_in_flops(task, tasks, (key for key, other in strategies.items()
                                              if key != task.key and other.space_signature == own.space_signature))
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


def start_from_other_thread_counts(task: Task, strategy, db: Database, k: int = 4) -> int:
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


def start_from_microkernels(task: Task, strategy, k: int) -> int:
    """On a CPU, queue up to ``k`` micro-kernel-shaped settings of a float32 matmul or convolution
    (``microkernel_params``) as this search's first candidates. Returns how many were queued."""
    space = getattr(strategy, "space", None)  # none for a search without a trace space (a test's fake)
    if k <= 0 or not isinstance(space, TraceSearchSpace) or task.target.kind.name != "llvm":
        return 0
    from autosched._tvm import llvm_vector_bits
    from autosched.spaces.microkernel import microkernel_params

    return sum(strategy.propose(p) for p in microkernel_params(space, llvm_vector_bits(task.target), k))


def start_from_relatives(task: Task, strategy, strategies: dict, tasks: dict[str, Task], db: Database,
                         k: int) -> int:
    """Tasks of the model whose spaces share a design with this one at other sizes (convolutions of other
    channel counts, a matmul of other widths), among those searched so far: the best schedules of the ``k``
    nearest in FLOPs, refitted to this task (``TraceSearchSpace.transfer_params``), are queued as this search's
    first candidates. Returns how many were queued."""
    from autosched.apply import schedule_from_record

    def signatures(strategy: Any) -> frozenset[str]:  # none for a search without a trace space (a test's fake)
        return getattr(getattr(strategy, "space", None), "design_signatures", frozenset())

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


@dataclass
class _Rounds:
    """What every search round needs: the session's builder and runner, the database, the deadline, the
    scheduler and each task's search strategy (created at its first round)."""

    session: Any  # TuningSession, or a fake with its config, builder, runner, prepare_io and strategy
    db: Database
    deadline: Deadline
    scheduler: TaskScheduler
    report: Callable[[str], None]
    strategies: dict = field(default_factory=dict)
    n_known: dict[str, int] = field(default_factory=dict)  # measurements of each task after this worker's round
    n_new: int = 0

    def run(self, state: TaskState) -> None:
        task, started = state.task, self.deadline.clock()
        if self.n_known.get(task.key, state.n_trials) != state.n_trials:  # another worker had rounds since ours:
            self.strategies.pop(task.key, None)  # a fresh strategy knows what it measured (no schedule twice)
        if task.key not in self.strategies:
            self.strategies[task.key] = self.session.strategy(task, self.db)
            if n := start_from_other_thread_counts(task, self.strategies[task.key], self.db):  # measured: no-op
                log.info("%s: proposes the %d best schedules tuned at another thread count", task.name, n)
            tasks = {s.task.key: s.task for s in self.scheduler.states}
            if n := start_from_relatives(task, self.strategies[task.key], self.strategies, tasks, self.db,
                                         self.session.config.relatives):
                log.info("%s: proposes the refitted best schedules of %d tasks like it", task.name, n)
            if n := start_from_microkernels(task, self.strategies[task.key], self.session.config.microkernel_seeds):
                log.info("%s: proposes %d micro-kernel-shaped schedules", task.name, n)
        share_sibling_bests(task, self.strategies, {s.task.key: s.task for s in self.scheduler.states}, self.db)
        want = state.n_trials + self.scheduler.round_size(state, self.deadline.left_s())

        def on_task_progress(p) -> None:
            state.n_trials, state.best_s = p.n_done, min(state.best_s, p.best_latency_s)
            self.report(task.name)

        result = self.session.tune(task, self.db, on_task_progress, self.strategies[task.key], want, self.deadline)
        log.debug("round of %s: %d measured (wanted %d, %d new) in %.1f s, best %.3g s%s", task.name, result.n_measured,
                  want, result.n_new, self.deadline.clock() - started, result.best_latency_s,
                  ", out of time" if result.out_of_time else "")
        self.scheduler.update(state, result.n_measured, result.best_latency_s,
                              exhausted=result.n_measured < want and not result.out_of_time,
                              round_s=self.deadline.clock() - started, n_new=result.n_new)
        self.n_known[task.key], self.n_new = state.n_trials, self.n_new + result.n_new
        self.report(task.name)


def tune_model_tasks(session, tasks: list[Task], db: Database, trials_per_task: int | None,
                     on_progress: Callable[[ModelProgress], None] | None = None,
                     deadline: Deadline = NO_DEADLINE) -> ModelTuneResult:
    """Give the model ``trials_per_task x len(tasks)`` measurements in all (earlier runs included; None or 0:
    no limit, which needs a deadline), or what fits before ``deadline``, whichever ends first."""
    if not trials_per_task and not deadline.limited:
        raise UserInputError("tuning a model without a trial limit needs a time budget (time_budget_s)")
    start, total = time.perf_counter(), trials_per_task * len(tasks) if trials_per_task else None
    scheduler: TaskScheduler | None = None
    done_at_start, untuned = 0, float("nan")

    def report(name: str) -> None:
        if on_progress:
            done, est = (scheduler.trials_done, scheduler.estimated_latency_s) if scheduler else (0, float("nan"))
            on_progress(ModelProgress(done, total, est, untuned, name, time.perf_counter() - start, done_at_start,
                                      deadline.left_s()))

    states = measure_baselines(session, tasks, db, deadline, report)
    mark_cheap(states, session.config.cheap_share)
    scheduler = TaskScheduler(states, total, session.config.batch_size)
    done_at_start, untuned = scheduler.trials_done, scheduler.estimated_latency_s
    report("")
    in_time, n_defaults = len(states) == len(tasks), 0
    if in_time:
        in_time, n_defaults = measure_defaults(session, scheduler, db, deadline, report)
    rounds = _Rounds(session, db, deadline, scheduler, report)
    while in_time and _next_round(rounds, db.leases()):
        pass
    out_of_time = not in_time or scheduler.next_task() is not None
    return ModelTuneResult(states, time.perf_counter() - start, n_defaults + rounds.n_new,
                           [t for t in tasks if t.key not in {s.task.key for s in states}], out_of_time)


def _next_round(rounds: _Rounds, leases: Leases) -> bool:
    """One round on the best task no other worker holds, or a short wait while they hold the only ones left;
    False when there is nothing left to do (budget spent, spaces exhausted, out of time)."""
    scheduler, deadline = rounds.scheduler, rounds.deadline
    busy = refresh(scheduler, rounds.db, leases)
    state = scheduler.next_task(deadline.left_s(), busy)
    if state is None:
        spent = scheduler.total_trials is not None and scheduler.trials_done >= scheduler.total_trials
        if not busy or spent or deadline.left_s() <= leases.poll_s:
            return False
        time.sleep(leases.poll_s)  # their rounds may end short (exhausted) or their tasks may be next best
        return True
    if leases.try_hold(state.task.key, scheduler.round_size(state, deadline.left_s())):
        try:
            rounds.run(state)
        finally:
            leases.release(state.task.key)
    return True  # else another worker took it a moment ago: choose again
