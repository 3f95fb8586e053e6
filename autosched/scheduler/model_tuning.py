"""Tune a whole model: its tasks share one trial budget and/or one time budget through the task scheduler.

The run goes: each task's untuned baseline (kept as a record); then every task's default schedule, measured
once (what ``compile`` applies to a task that was never searched: measured, so that it is used only where it
beats the baseline: an Inception-v3 pooling ran 25x slower on its first design's default than untuned), the
cheap tasks (``mark_cheap``) first, which keep it instead of a search (on a GPU only theirs: a group without a
record gets dlight's schedule, the baseline); then the cheap tasks are chosen again, by their share of the
estimate with the defaults measured; then search rounds, each to the task the
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
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autosched._tvm import save_json
from autosched.db import Database, Leases, TaskRow
from autosched.errors import ReferenceBuildError, UserInputError
from autosched.records import Status, TuningRecord
from autosched.scheduler.default_candidates import default_candidates
from autosched.scheduler.search_seeds import (
    share_sibling_bests,
    start_from_microkernels,
    start_from_other_thread_counts,
    start_from_relatives,
)
from autosched.scheduler.task_scheduler import INF, TaskScheduler, TaskState, mark_cheap
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
    in_model: Any = None  # deploy.in_model.InModelResult: the end-to-end phase's figures (None: not run)

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
        """Tasks kept on their default schedule (cheap: a cheap pattern, among the smallest; ``mark_cheap``)."""
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
        mark_cheap(states, session.config.cheap_share)  # again: by the measured defaults' share of the estimate
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
