"""The tune loop. It speaks Task / Candidate / MeasureResult only, so fakes and real parts plug in alike."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from autosched._tvm import TVM_VERSION
from autosched.db.base import Database
from autosched.measure.base import Builder, Runner, TaskIO
from autosched.records import Candidate, MeasureResult, Status, TuningRecord
from autosched.search.base import SearchStrategy
from autosched.tasks import Task
from autosched.version import __version__

log = logging.getLogger("autosched.tune")


@dataclass
class TuneProgress:
    task_name: str
    n_done: int
    n_total: int
    best_latency_s: float
    flops: float
    elapsed_s: float
    n_done_at_start: int = 0

    @property
    def best_gflops(self) -> float:
        return self.flops / self.best_latency_s / 1e9 if self.best_latency_s < float("inf") else 0.0

    @property
    def eta_s(self) -> float:
        return eta_s(self.elapsed_s, self.n_done - self.n_done_at_start, self.n_total - self.n_done)


def eta_s(elapsed_s: float, n_new: int, n_left: int) -> float:
    """Seconds left at the pace of this run so far (NaN before the first new measurement)."""
    return elapsed_s / n_new * n_left if n_new else float("nan")


@dataclass(frozen=True)
class Deadline:
    """A wall-clock limit: ``at`` is a reading of ``clock`` (``time.monotonic``; tests pass a fake clock)."""

    at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        """``seconds`` from now; 0 or less: no limit."""
        return cls(clock() + seconds if seconds > 0 else float("inf"), clock)

    @property
    def limited(self) -> bool:
        return self.at < float("inf")

    def left_s(self) -> float:
        return self.at - self.clock()

    def allows(self, expected_s: float) -> bool:
        """Whether something expected to take ``expected_s`` seconds still ends in time."""
        return self.left_s() > expected_s

    def allows_another(self, since: float, n_done: int) -> bool:
        """Whether one more step, as long as the mean of the ``n_done`` steps begun at ``since``, ends in time."""
        return self.allows((self.clock() - since) / n_done if n_done else 0.0)


NO_DEADLINE = Deadline(float("inf"))


@dataclass
class TuneResult:
    task: Task
    best: TuningRecord | None
    n_measured: int  # in the database, all runs
    n_new: int  # in this run
    elapsed_s: float
    status_counts: Counter = field(default_factory=Counter)
    out_of_time: bool = False  # stopped by the deadline before ``n_trials``

    @property
    def best_latency_s(self) -> float:
        return self.best.latency_s if self.best else float("inf")

    @property
    def s_per_trial(self) -> float:
        return self.elapsed_s / self.n_new if self.n_new else float("nan")


def to_record(task: Task, cand: Candidate, res: MeasureResult) -> TuningRecord:
    return TuningRecord(task.key, task.target_json, cand.params, cand.decisions, cand.trace_json, res.status,
                        res.latencies_s, res.error, __version__, TVM_VERSION, task.space_version,
                        predicted_score=cand.predicted_score)


BASELINE_DECISIONS = ["unscheduled"]  # the default build as a record: no trace, never equal to a searched schedule


def baseline_record(task: Task, res: MeasureResult) -> TuningRecord:
    """TVM's default (unscheduled) build, measured, as a record: it competes in ``best`` like any schedule."""
    return to_record(task, Candidate(task.key, {"baseline": "unscheduled"}, list(BASELINE_DECISIONS)), res)


def _ask(task: Task, strategy: SearchStrategy, db: Database, n: int, counts: Counter) -> list[Candidate]:
    """Up to ``n`` candidates; the ones rejected before building go to the database as INVALID records."""
    cands = strategy.ask(n)
    rejected = strategy.drain_rejected()
    db.commit([to_record(task, c, MeasureResult(Status.INVALID, error=c.invalid_reason)) for c in rejected])
    counts[Status.INVALID] += len(rejected)
    return cands


def _measure(task: Task, strategy: SearchStrategy, builder: Builder, runner: Runner, db: Database, io: TaskIO,
             cands: list[Candidate]) -> list[TuningRecord]:
    """Build and run a batch; its records are saved before the sampler hears of them."""
    try:
        results = runner.run(builder.build(cands), io)
    except BaseException:
        strategy.abandon(cands)  # nothing half-measured reaches the database or the sampler
        raise
    records = [to_record(task, c, r) for c, r in zip(cands, results, strict=True)]
    with _interrupt_deferred():  # a Ctrl-C here would leave records the sampler never heard of
        db.commit(records)
        strategy.tell(cands, results)
    return records


@contextlib.contextmanager
def _interrupt_deferred():
    """Hold a Ctrl-C (SIGINT) until the block ends, then raise it as usual (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if caught and callable(previous):
        previous(signal.SIGINT, None)  # the default handler raises KeyboardInterrupt
    elif caught and previous == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)  # what it would have done


def tune_task(task: Task, strategy: SearchStrategy, builder: Builder, runner: Runner, db: Database, io: TaskIO,
              n_trials: int, batch_size: int = 8, on_progress: Callable[[TuneProgress], None] | None = None,
              deadline: Deadline = NO_DEADLINE) -> TuneResult:
    """Measure candidates until the task has ``n_trials`` measurements in ``db`` (resumes earlier runs), or
    until the next batch would not end before ``deadline`` (judged by this call's batches so far); a batch
    whose proposals took the time that was left is dropped unmeasured."""
    start, counts, n_new = time.perf_counter(), Counter(), 0
    done = db.n_measured(task.key)
    best = db.best(task.key, task.target_json)
    batch_start, n_batches, out_of_time = deadline.clock(), 0, False
    while done < n_trials:
        if not deadline.allows_another(batch_start, n_batches):
            out_of_time = True
            break
        cands = _ask(task, strategy, db, min(batch_size, n_trials - done), counts)
        if not cands:
            log.info("%s: search space exhausted after %d trials", task.name, done)
            break
        if deadline.left_s() <= 0:
            strategy.abandon(cands)
            out_of_time = True
            break
        records = _measure(task, strategy, builder, runner, db, io, cands)
        counts.update(r.status for r in records)
        n_new, n_batches = n_new + len(cands), n_batches + 1
        done = max(done + len(cands), db.n_measured(task.key))  # other tuners on the same database count too
        for rec in records:
            if rec.status is Status.OK and (best is None or rec.latency_s < best.latency_s):
                best = rec
        if on_progress:
            on_progress(TuneProgress(task.name, done, n_trials, best.latency_s if best else float("inf"),
                                     task.flops, time.perf_counter() - start, done - n_new))
    if out_of_time:
        log.info("%s: time budget reached after %d trials", task.name, done)
    return TuneResult(task, db.best(task.key, task.target_json), done, n_new, time.perf_counter() - start, counts,
                      out_of_time)
