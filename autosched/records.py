"""Values that flow through the tune loop: candidates, results, tuning records."""

from __future__ import annotations

import enum
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any


def schedule_key(decisions: list[Any]) -> str:
    """The identity of a schedule: its effective sampling decisions (two knob settings can give one schedule)."""
    return json.dumps(decisions, sort_keys=True)


def median_latency(status: Status, latencies_s: list[float]) -> float:
    """Median latency of a correct run; +inf for anything that did not run correctly."""
    return statistics.median(latencies_s) if status is Status.OK and latencies_s else float("inf")


class Status(enum.StrEnum):
    OK = "OK"
    BUILD_ERROR = "BUILD_ERROR"
    RUN_ERROR = "RUN_ERROR"
    TIMEOUT = "TIMEOUT"
    WRONG_RESULT = "WRONG_RESULT"
    INVALID = "INVALID"


@dataclass
class Candidate:
    """One proposed schedule: the knob values the strategy chose and what the space made of them."""

    task_key: str
    params: dict[str, Any]
    decisions: list[Any] = field(default_factory=list)  # effective sampling decisions (dedup key)
    trace_json: Any = None  # the full schedule trace, plain JSON
    mod_json: str | None = None  # the scheduled IRModule (tvm.ir.save_json), for the builder
    trial_number: int | None = None  # Optuna trial number, set by the strategy
    invalid_reason: str | None = None
    predicted_score: float | None = None  # the cost model's score, when one screened this candidate

    def dedup_key(self) -> str:
        return schedule_key(self.decisions)


@dataclass
class BuildResult:
    candidate: Candidate
    artifact_path: str | None
    error: str | None = None
    status: Status = Status.OK
    build_s: float = 0.0


@dataclass
class MeasureResult:
    status: Status
    latencies_s: list[float] = field(default_factory=list)
    error: str | None = None
    build_s: float = 0.0
    run_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK and bool(self.latencies_s)

    @property
    def latency_s(self) -> float:
        """Median latency; +inf for anything that did not run correctly."""
        return median_latency(self.status, self.latencies_s)


@dataclass
class TuningRecord:
    """One measured (or rejected) candidate as stored in the database."""

    task_key: str
    target: str  # full target JSON
    params: dict[str, Any]
    decisions: list[Any]
    trace_json: Any
    status: Status
    latencies_s: list[float]
    error: str | None
    autosched_version: str
    tvm_version: str
    space_version: int
    created_at: float = field(default_factory=time.time)
    predicted_score: float | None = None  # the cost model's score when it was proposed (None: not screened)
    record_id: int | None = None

    @property
    def latency_s(self) -> float:
        return median_latency(self.status, self.latencies_s)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d.pop("record_id")
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TuningRecord:
        d = dict(d)
        d["status"] = Status(d["status"])
        return cls(**d)
