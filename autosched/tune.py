"""The tune loop. It speaks Task / Candidate / MeasureResult only, so fakes and real parts plug in alike."""

from __future__ import annotations

import logging
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


@dataclass
class TuneResult:
    task: Task
    best: TuningRecord | None
    n_measured: int  # in the database, all runs
    n_new: int  # in this run
    elapsed_s: float
    status_counts: Counter = field(default_factory=Counter)

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


def tune_task(task: Task, strategy: SearchStrategy, builder: Builder, runner: Runner, db: Database, io: TaskIO,
              n_trials: int, batch_size: int = 8,
              on_progress: Callable[[TuneProgress], None] | None = None) -> TuneResult:
    """Measure candidates until the task has ``n_trials`` measurements in ``db`` (resumes earlier runs)."""
    start, counts = time.perf_counter(), Counter()
    done = done_at_start = db.n_measured(task.key)
    best = db.best(task.key, task.target_json)
    while done < n_trials:
        cands = strategy.ask(min(batch_size, n_trials - done))
        rejected = strategy.drain_rejected()
        db.commit([to_record(task, c, MeasureResult(Status.INVALID, error=c.invalid_reason)) for c in rejected])
        counts[Status.INVALID] += len(rejected)
        if not cands:
            log.info("%s: search space exhausted after %d trials", task.name, done)
            break
        try:
            results = runner.run(builder.build(cands), io)
        except BaseException:
            strategy.abandon(cands)  # nothing half-measured reaches the database or the sampler
            raise
        records = [to_record(task, c, r) for c, r in zip(cands, results, strict=True)]
        db.commit(records)  # measurements are saved before the sampler hears of them
        strategy.tell(cands, results)
        counts.update(r.status for r in results)
        done += len(cands)
        for rec in records:
            if rec.status is Status.OK and (best is None or rec.latency_s < best.latency_s):
                best = rec
        if on_progress:
            on_progress(TuneProgress(task.name, done, n_trials, best.latency_s if best else float("inf"),
                                     task.flops, time.perf_counter() - start, done_at_start))
    return TuneResult(task, db.best(task.key, task.target_json), done, done - done_at_start,
                      time.perf_counter() - start, counts)
