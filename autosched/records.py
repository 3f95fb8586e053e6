"""Values that flow through the tune loop: candidates, results, tuning records."""

from __future__ import annotations

import enum
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from autosched.errors import UserInputError


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
    def from_json(cls, d: Any) -> TuningRecord:
        """A record from its ``to_json`` form, every field checked (else InvalidRecord naming the field): the one
        way records come in from files."""
        if not isinstance(d, dict):
            raise InvalidRecord(f"a record is an object, not {short_repr(d)}")
        unknown = set(d) - _RECORD_FIELDS.keys()
        if unknown:
            raise InvalidRecord(f"unknown record field {sorted(unknown)[0]!r}")
        for name, check in _RECORD_FIELDS.items():
            if name not in d:
                if name in _OPTIONAL:
                    continue
                raise InvalidRecord(f"record field {name!r} is missing")
            problem = check(d[name])
            if problem:
                raise InvalidRecord(f"record field {name!r} is {short_repr(d[name])}: {problem}")
        status = Status(d["status"])
        lat = d["latencies_s"]
        if status is Status.OK and not all(x > 0 for x in lat):
            raise InvalidRecord(f"record field 'latencies_s' is {short_repr(lat)}: an OK record's latencies are "
                                "positive seconds")
        return cls(**{**d, "status": status, "latencies_s": [float(x) for x in lat]})


class InvalidRecord(UserInputError):
    """A record (from a file) with a missing, mistyped or impossible field."""


def short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _json_text(x: Any) -> str | None:
    if not isinstance(x, str):
        return "must be a string"
    try:
        json.loads(x)
    except ValueError:
        return "must be JSON text"
    return None


_RECORD_FIELDS = {  # name -> the problem with a value (None: fine)
    "task_key": lambda x: None if isinstance(x, str) and x else "must be a non-empty string",
    "target": lambda x: _json_text(x),
    "params": lambda x: None if isinstance(x, dict) else "must be an object",
    "decisions": lambda x: None if isinstance(x, list) else "must be a list",
    "trace_json": lambda x: None,
    "status": lambda x: None if x in set(Status) else f"must be one of {', '.join(Status)}",
    "latencies_s": lambda x: None if isinstance(x, list) and all(_number(v) and v >= 0 for v in x)
    else "must be a list of finite, non-negative seconds",
    "error": lambda x: None if x is None or isinstance(x, str) else "must be a string or null",
    "autosched_version": lambda x: None if isinstance(x, str) else "must be a string",
    "tvm_version": lambda x: None if isinstance(x, str) else "must be a string",
    "space_version": lambda x: None if isinstance(x, int) and not isinstance(x, bool) else "must be an integer",
    "created_at": lambda x: None if _number(x) else "must be a finite number (seconds since the epoch)",
    "predicted_score": lambda x: None if x is None or _number(x) else "must be a finite number or null",
}
_OPTIONAL = {"trace_json", "error", "created_at", "predicted_score"}
