"""Fakes for fast unit tests of the tune loop: no compiler, no processes, deterministic results."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from autosched.measure.base import Builder, Runner, TaskIO
from autosched.records import BuildResult, Candidate, MeasureResult, Status, TuningRecord, schedule_key
from autosched.search.base import SearchStrategy


class NullBuilder(Builder):
    """Pretends every candidate built."""

    def __init__(self) -> None:
        self.n_built = 0
        self.timeouts: list[float | None] = []  # each call's ``timeout_s``

    def build(self, candidates: list[Candidate], timeout_s: float | None = None) -> list[BuildResult]:
        self.n_built += len(candidates)
        self.timeouts.append(timeout_s)
        return [BuildResult(c, artifact_path=None) for c in candidates]


def hashed_latency(candidate: Candidate) -> float:
    """A deterministic pseudo-latency in [1 ms, 2 ms) from the candidate's schedule."""
    digest = hashlib.sha256(candidate.dedup_key().encode()).digest()
    return 1e-3 * (1 + int.from_bytes(digest[:4], "little") / 2**32)


class NullRunner(Runner):
    """Returns ``latency_fn(candidate)`` (default: hashed) for every build; ``status_fn`` may fail some."""

    def __init__(self, latency_fn: Callable[[Candidate], float] = hashed_latency,
                 status_fn: Callable[[Candidate], Status] | None = None):
        self.latency_fn, self.status_fn = latency_fn, status_fn
        self.n_run = 0

    def run(self, builds: list[BuildResult], io: TaskIO) -> list[MeasureResult]:
        out = []
        for b in builds:
            self.n_run += 1
            status = self.status_fn(b.candidate) if self.status_fn else Status.OK
            if status is Status.OK:
                out.append(MeasureResult(Status.OK, [self.latency_fn(b.candidate)] * 3))
            else:
                out.append(MeasureResult(status, error=f"fake {status.value}"))
        return out


class ReplayRunner(Runner):
    """Replays the results of stored records, matched by schedule; unknown schedules are RUN_ERRORs."""

    def __init__(self, records: list[TuningRecord]):
        self._by_key = {schedule_key(r.decisions): r for r in records}

    def run(self, builds: list[BuildResult], io: TaskIO) -> list[MeasureResult]:
        out = []
        for b in builds:
            rec = self._by_key.get(b.candidate.dedup_key())
            if rec is None:
                out.append(MeasureResult(Status.RUN_ERROR, error="not in the replayed records"))
            else:
                out.append(MeasureResult(rec.status, list(rec.latencies_s), rec.error))
        return out


class ListStrategy(SearchStrategy):
    """Proposes a fixed list of candidates in order (for tests of builders, runners and the loop)."""

    def __init__(self, candidates: list[Candidate]):
        self._queue = list(candidates)
        self.told: list[tuple[Candidate, MeasureResult]] = []

    def ask(self, n: int) -> list[Candidate]:
        out, self._queue = self._queue[:n], self._queue[n:]
        return out

    def tell(self, candidates: list[Candidate], results: list[MeasureResult]) -> None:
        self.told.extend(zip(candidates, results, strict=True))
