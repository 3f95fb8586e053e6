"""``autosched report``: what a tuning database says about its runs, as plain numbers.

``gather(db)`` reads the tasks, the records and Optuna's trials of a database into a :class:`Report`: tuning
curves per task, the end-to-end estimate (sum of weight x best latency) over tuning time, the time split,
the best schedule per task, failures by status and the cost model's predictions against the measurements.
``Report.to_json()`` is the ``--format json`` output; ``autosched.report_html.render_html`` draws the same
numbers into one self-contained HTML file. Reading never writes to the database.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from autosched._tvm import Target, arg_specs, load_json
from autosched.bandwidth import bytes_moved, gbps
from autosched.db import Database, TaskRow
from autosched.masking import mask_secrets
from autosched.records import Status, TuningRecord
from autosched.search.study import task_studies
from autosched.targets import copy_bandwidth_for
from autosched.tasks import describe_target
from autosched.tune import BASELINE_DECISIONS
from autosched.version import __version__

REPORT_FORMAT = "autosched-report"
REPORT_VERSION = 3  # 2: tasks sorted by share, with share and search; 3: bytes moved, GB/s, copy bandwidth, the
# end-to-end phase's in-model times
RUN_GAP_S = 15 * 60.0  # records further apart than this are separate runs: the gap is cut from the time axis
TIMING_ATTR = "timing_s"  # the Optuna user attribute set on measured trials (search/optuna_strategy.py)
SPLIT_PARTS = ("search", "build", "measure")
MIN_RANK_PAIRS = 5  # fewer predicted-and-measured candidates: no rank correlation


@dataclass
class Curve:
    """A task's measured candidates in the order they were measured (rejected-before-build ones left out)."""

    trial: list[int] = field(default_factory=list)  # 1, 2, ...
    latency_s: list[float | None] = field(default_factory=list)  # None: the candidate failed
    best_s: list[float | None] = field(default_factory=list)  # best so far (None before the first success)
    status: list[str] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)  # tuning time (see Report.time_split) when measured
    baseline_trial: int | None = None  # the trial that was the untuned (default) build


@dataclass
class Predictions:
    """Cost-model scores of the candidates it picked, against what was measured: the model is trained on
    ``best latency of the task / latency`` (1 for the best, 0 for a failure), so the two are on one scale."""

    predicted: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)
    spearman: float | None = None


@dataclass
class TaskReport:
    key: str
    name: str
    target: str  # "llvm znver5 x1"
    flops: float
    weight: int  # calls per inference; 1 where the database does not say (see weight_known)
    weight_known: bool  # False: a model's task tuned before its weight was stored (counted once)
    pattern: str
    n_measured: int
    n_rejected: int  # rejected before building (INVALID)
    status_counts: dict[str, int]
    untuned_s: float | None
    best: dict[str, Any] | None  # latency_s, gflops, gbps, of_copy, speedup, params, decisions, trial, baseline
    curve: Curve
    timing: dict[str, float]  # search_s, build_s, measure_s, build_worker_s, n_timed
    predictions: Predictions
    errors: dict[str, list[str]]  # status -> a few distinct error lines
    search: dict[str, Any] = field(default_factory=dict)  # state, n_trials (None: unknown), short, text: _search
    share: float | None = None  # of the estimated model latency (weight x best latency over their sum)
    in_model: dict[str, Any] | None = None  # the model's end-to-end phase: in_model_s (per inference, all calls;
    # None: not timed inside), model, model_s, chosen_is_best (its choice is the fastest alone); None: no phase
    n_bytes: int | None = None  # its buffers' bytes, inputs and outputs (None: its PrimFunc could not be read)


@dataclass
class Report:
    database: str
    generated_at: float
    tasks: list[TaskReport]
    end_to_end: dict[str, Any]  # time_s, estimated_s, untuned_s, final_s, tasks, missing, weights_known;
    # measured: per model its end-to-end phase's latency ({model, model_s, n_tasks}), newest first
    time_split: dict[str, Any]  # search_s, build_s, measure_s, other_s, wall_s, n_runs, n_timed, n_trials,
    # trials_per_s (searched trials over the tuning wall time)
    failures: dict[str, int]  # status -> count over every task (OK included)
    predictions: dict[str, Any]  # n, spearman (pooled over tasks)
    notes: list[str]
    copy_bandwidth: dict[str, float] = field(default_factory=dict)  # target (as in TaskReport) -> this machine's
    # copy bandwidth at its thread count, bytes/s (targets of this CPU only), which each best's of_copy is of
    autosched_version: str = __version__
    format: str = REPORT_FORMAT
    version: int = REPORT_VERSION

    @property
    def n_measured(self) -> int:
        return sum(t.n_measured for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (infinities and NaNs become null)."""
        return _finite(asdict(self))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, allow_nan=False)


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


# --- gathering ---------------------------------------------------------------------------------------------------
def gather(db: Database, name: str = "") -> Report:
    """Everything the report shows, from one database (``name``: how to call it in the report)."""
    rows = db.tasks()
    records = {row.task_key: [r for r in db.records(row.task_key) if r.target == row.target] for row in rows}
    clock = TuningClock([r.created_at for recs in records.values() for r in recs])
    found = _optuna_timings(db, [row.task_key for row in rows])
    timings = found or {}
    copy = _copy_bandwidths(rows)
    tasks = [_task_report(row, records[row.task_key], clock, timings.get(row.task_key, []),
                          copy.get(describe_target(row.target))) for row in rows]
    for t in tasks:
        t.search = _search(t, len(timings.get(t.key, [])) if found is not None else None)
        t.in_model = _in_model(db, t)
    notes: list[str] = []
    end_to_end = _end_to_end(tasks, records, clock, notes)
    end_to_end["measured"] = _measured_models(db, rows)
    tasks = _by_share(tasks)
    split = _time_split(tasks, clock, notes)
    failures = Counter()
    for t in tasks:
        failures.update(t.status_counts)
    preds = _pooled_predictions(tasks, notes)
    shown = mask_secrets(name) if name else db.display_name
    return Report(shown, time.time(), tasks, end_to_end, split, dict(failures), preds, notes, copy)


def _copy_bandwidths(rows: list[TaskRow]) -> dict[str, float]:
    """This machine's copy bandwidth for each target of the tasks that is this CPU (``copy_bandwidth_for``)."""
    out: dict[str, float] = {}
    for text in {row.target for row in rows}:
        try:
            rate = copy_bandwidth_for(Target(json.loads(text)))
        except (ValueError, TypeError, RuntimeError):  # not a target this TVM reads: nothing to compare with
            rate = None
        if rate:
            out[describe_target(text)] = rate
    return out


def _bytes(row: TaskRow) -> int | None:
    """The bytes of the task's buffers (``Task.n_bytes``), from its stored PrimFunc; None where it is unreadable."""
    try:
        return bytes_moved(arg_specs(load_json(row.workload_json)["main"]))
    except (ValueError, TypeError, KeyError, RuntimeError, AttributeError):
        return None


def _in_model(db: Database, t: TaskReport) -> dict[str, Any] | None:
    """What the end-to-end phase of a model chose for the task (``Database.selection``), if one ran."""
    chosen = db.selection(t.key)
    if chosen is None:
        return None
    best = db.best(t.key, chosen.target)
    return {"in_model_s": chosen.in_model_s, "model": chosen.model, "model_s": chosen.model_s,
            "chosen_is_best": best is not None and best.record_id == chosen.record_id}


def _measured_models(db: Database, rows: list[TaskRow]) -> list[dict[str, Any]]:
    """Each model whose end-to-end phase ran on this database: its latency as measured there, newest first."""
    chosen = [c for row in rows if (c := db.selection(row.task_key)) is not None]
    newest: dict[str, Any] = {}
    for c in sorted(chosen, key=lambda c: c.created_at):
        newest[c.model] = {"model": c.model, "model_s": c.model_s, "at": c.created_at,
                           "n_tasks": sum(x.model == c.model for x in chosen)}
    return sorted(newest.values(), key=lambda m: -m["at"])


class TuningClock:
    """Tuning time: seconds since the first record, with gaps over ``RUN_GAP_S`` (separate runs) cut out."""

    def __init__(self, stamps: list[float], gap_s: float = RUN_GAP_S):
        self._starts: list[tuple[float, float]] = []  # (wall-clock start of a run, tuning time at its start)
        last = None
        for t in sorted(stamps):
            if last is None or t - last > gap_s:
                offset = self._starts[-1][1] + (last - self._starts[-1][0]) if last is not None else 0.0
                self._starts.append((t, offset))
            last = t
        self.wall_s = self(last) if last is not None else 0.0

    @property
    def n_runs(self) -> int:
        return len(self._starts)

    def __call__(self, stamp: float) -> float:
        start, offset = next(((s, o) for s, o in reversed(self._starts) if s <= stamp), self._starts[0])
        return offset + max(stamp - start, 0.0)


def _task_report(row: TaskRow, recs: list[TuningRecord], clock: TuningClock, timings: list[dict],
                 copy_Bps: float | None = None) -> TaskReport:
    measured = [r for r in recs if r.status is not Status.INVALID]
    baseline = next((r for r in measured if r.decisions == BASELINE_DECISIONS), None)
    untuned = baseline.latency_s if baseline is not None and baseline.status is Status.OK else None
    curve, n_bytes = _curve(measured, clock), _bytes(row)
    return TaskReport(
        key=row.task_key, name=row.name, target=describe_target(row.target),
        flops=row.flops, weight=int(row.info.get("weight", 1)),
        weight_known="weight" in row.info or "group" not in row.info,  # an operator or program is called once
        pattern=str(row.info.get("pattern", "")),
        n_measured=len(measured), n_rejected=len(recs) - len(measured),
        status_counts=dict(Counter(r.status.value for r in recs)), untuned_s=untuned,
        best=_best(row, measured, untuned, n_bytes, copy_Bps), curve=curve, timing=_sum_timings(timings),
        predictions=_predictions(measured), errors=_errors(recs), n_bytes=n_bytes,
    )


def _curve(measured: list[TuningRecord], clock: TuningClock) -> Curve:
    curve, best = Curve(), math.inf
    for i, r in enumerate(measured, start=1):
        ok = r.status is Status.OK and bool(r.latencies_s)
        best = min(best, r.latency_s) if ok else best
        curve.trial.append(i)
        curve.latency_s.append(r.latency_s if ok else None)
        curve.best_s.append(best if best < math.inf else None)
        curve.status.append(r.status.value)
        curve.time_s.append(clock(r.created_at))
        if r.decisions == BASELINE_DECISIONS and curve.baseline_trial is None:
            curve.baseline_trial = i
    return curve


def _best(row: TaskRow, measured: list[TuningRecord], untuned_s: float | None, n_bytes: int | None = None,
          copy_Bps: float | None = None) -> dict[str, Any] | None:
    """The best measured schedule; ``gbps``: the task's bytes over its latency, ``of_copy``: that as a share of
    ``copy_Bps`` (None where either is unknown)."""
    ok = [(i, r) for i, r in enumerate(measured, start=1) if r.status is Status.OK and r.latencies_s]
    if not ok:
        return None
    trial, r = min(ok, key=lambda p: p[1].latency_s)
    rate = gbps(n_bytes, r.latency_s) if n_bytes else None
    rate = rate if rate == rate else None
    return {"latency_s": r.latency_s, "gflops": row.flops / r.latency_s / 1e9 if r.latency_s > 0 else None,
            "gbps": rate, "of_copy": rate * 1e9 / copy_Bps if rate and copy_Bps else None,
            "speedup": untuned_s / r.latency_s if untuned_s and r.latency_s > 0 else None,
            "params": r.params, "decisions": r.decisions, "trial": trial,
            "baseline": r.decisions == BASELINE_DECISIONS}


def _errors(recs: list[TuningRecord], per_status: int = 3) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in recs:
        if r.status is Status.OK or not r.error:
            continue
        line = r.error.strip().splitlines()[0][:300] if r.error.strip() else ""
        seen = out.setdefault(r.status.value, [])
        if line and line not in seen and len(seen) < per_status:
            seen.append(line)
    return out


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < MIN_RANK_PAIRS or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def _predictions(measured: list[TuningRecord]) -> Predictions:
    ok = [r.latency_s for r in measured if r.status is Status.OK and r.latencies_s]
    best = min(ok, default=math.inf)
    p = Predictions()
    for r in measured:
        if r.predicted_score is None:
            continue
        p.predicted.append(float(r.predicted_score))
        p.measured.append(best / r.latency_s if r.latency_s < math.inf else 0.0)
    p.spearman = _spearman(p.predicted, p.measured)
    return p


def _pooled_predictions(tasks: list[TaskReport], notes: list[str]) -> dict[str, Any]:
    predicted = [x for t in tasks for x in t.predictions.predicted]
    measured = [y for t in tasks for y in t.predictions.measured]
    if not predicted:
        notes.append("no cost-model predictions are stored: the runs measured every proposal (--cost-model none, "
                     "or the model was not ready yet), or the database predates schema v2")
    return {"n": len(predicted), "spearman": _spearman(predicted, measured)}


def _optuna_timings(db: Database, keys: list[str]) -> dict[str, list[dict]] | None:
    """Task key -> the timing attributes of its study's measured trials (read only: no study, no storage made);
    None where the database holds no Optuna storage (an export, a memory database): who measured what is unknown."""
    engine = getattr(db, "engine", None)
    if engine is None:
        return None
    import sqlalchemy as sa

    if "studies" not in sa.inspect(engine).get_table_names():
        return None
    storage = db.optuna_storage()
    studies = task_studies(storage)
    out: dict[str, list[dict]] = {}
    for key in keys:  # a task's study, and one begun when its space gained a design (StudyBridge._open_study)
        ids = [storage.get_study_id_from_name(s.study_name) for s in studies.get(key, [])]
        if not ids:
            continue
        trials = [t for i in ids for t in storage.get_all_trials(i, deepcopy=False)]
        out[key] = [t.user_attrs.get(TIMING_ATTR) for t in trials
                    if t.state.is_finished() and t.user_attrs.get("status") not in (None, Status.INVALID.value)
                    and not t.user_attrs.get("duplicate")]
    return out


SEARCHED, DEFAULTS, UNTUNED_ONLY, NEVER_REACHED, UNKNOWN = "searched", "defaults", "untuned only", "never reached", \
    "unknown"


def _search(t: TaskReport, n_searched: int | None) -> dict[str, Any]:
    """Whether the search reached the task, from what the database knows: its study's measured trials (Optuna's
    storage), else its records: the untuned build (the baseline), the other records measured before any search
    (the task's default schedule, other micro-kernels, the bests of similar tasks and of other CPUs: not told
    apart by the database), or nothing."""
    n_other = t.n_measured - (t.curve.baseline_trial is not None)
    kept = "the untuned build" if t.best and t.best["baseline"] else "the best of them"
    if n_searched:
        state, short, text = SEARCHED, f"yes: {n_searched} trials", f"searched: {n_searched} trials from its study"
    elif n_searched is None and t.predictions.predicted:  # the cost model screens only the search's proposals
        n_picked = len(t.predictions.predicted)
        state, short = SEARCHED, f"yes: {n_picked}+ trials"
        text = (f"searched: {n_picked} of its {t.n_measured} measured candidates were the cost model's picks (no "
                "Optuna study in this database to count the search's other trials)")
    elif n_searched is None and n_other:
        state, short = UNKNOWN, "unknown"
        text = (f"{n_other} schedules measured besides the untuned build, by the search or as defaults: this "
                "database holds no Optuna study to tell")
    elif n_other:
        state, short = DEFAULTS, f"no: {n_other} defaults"
        text = (f"not searched: {n_other} default candidates measured (its default schedule, other micro-kernels, "
                f"similar tasks' and other CPUs' bests), {kept} kept")
    elif t.n_measured:
        state, short, text = UNTUNED_ONLY, "no: untuned only", "not searched: only its untuned build measured"
    else:
        state, short, text = NEVER_REACHED, "never reached", "never reached: nothing measured"
    return {"state": state, "n_trials": n_searched, "short": short, "text": text}


def _by_share(tasks: list[TaskReport]) -> list[TaskReport]:
    """Tasks by their share of the estimated latency, largest first (each task's weight x best latency over their
    sum); those without a success after, by weight x untuned latency, then the unmeasured."""
    cost = {t.key: t.weight * t.best["latency_s"] for t in tasks if t.best}
    total = sum(cost.values())
    for t in tasks:
        t.share = cost[t.key] / total if t.key in cost and total > 0 else None
    return sorted(tasks, key=lambda t: (t.key not in cost, -cost.get(t.key, t.weight * (t.untuned_s or 0.0))))


def _sum_timings(timings: list[dict | None]) -> dict[str, float]:
    done = [t for t in timings if t]
    out = {f"{part}_s": float(sum(t.get(part, 0.0) for t in done)) for part in (*SPLIT_PARTS, "build_worker")}
    out.update(n_timed=len(done), n_trials=len(timings))
    return out


def _time_split(tasks: list[TaskReport], clock: TuningClock, notes: list[str]) -> dict[str, Any]:
    split: dict[str, Any] = {f"{p}_s": float(sum(t.timing[f"{p}_s"] for t in tasks)) for p in SPLIT_PARTS}
    split["build_worker_s"] = float(sum(t.timing["build_worker_s"] for t in tasks))
    split["wall_s"] = clock.wall_s
    split["other_s"] = max(clock.wall_s - sum(split[f"{p}_s"] for p in SPLIT_PARTS), 0.0)
    split["n_runs"] = clock.n_runs
    split["n_timed"] = sum(int(t.timing["n_timed"]) for t in tasks)
    split["n_trials"] = sum(int(t.timing["n_trials"]) for t in tasks)
    split["trials_per_s"] = split["n_trials"] / clock.wall_s if clock.wall_s > 0 else 0.0
    if split["n_timed"] < split["n_trials"]:
        notes.append(f"the time split covers {split['n_timed']} of {split['n_trials']} searched trials: the others "
                     "were tuned by an autosched that did not record it")
    return split


def _end_to_end(tasks: list[TaskReport], records: dict[str, list[TuningRecord]], clock: TuningClock,
                notes: list[str]) -> dict[str, Any]:
    """Estimated model latency (sum over tasks of weight x best latency so far) at each improvement."""
    included = [t for t in tasks if t.best is not None]
    missing = [t.name for t in tasks if t.best is None]
    if missing:
        notes.append(f"left out of the end-to-end estimate (no successful measurement): {', '.join(missing)}")
    unknown = [t.name for t in included if not t.weight_known]
    if unknown:
        notes.append(f"how often {len(unknown)} of the model's tasks run per inference (their weight) is not stored "
                     "in this database: the end-to-end estimate counts each once")
    events = sorted((r.created_at, r.record_id or 0, t.key, r.latency_s) for t in included for r in records[t.key]
                    if r.status is Status.OK and r.latencies_s)
    weight = {t.key: t.weight for t in included}
    best: dict[str, float] = {}
    times: list[float] = []
    values: list[float] = []
    for stamp, _, key, latency in events:
        if latency >= best.get(key, math.inf):
            continue
        best[key] = latency
        if len(best) == len(included):
            times.append(clock(stamp))
            values.append(sum(weight[k] * v for k, v in best.items()))
    if times and times[-1] < clock.wall_s:  # the line runs on to the end of tuning
        times.append(clock.wall_s)
        values.append(values[-1])
    untuned = [t.weight * t.untuned_s for t in included if t.untuned_s is not None]
    return {"time_s": times, "estimated_s": values, "final_s": values[-1] if values else None,
            "untuned_s": sum(untuned) if included and len(untuned) == len(included) else None,
            "tasks": [t.name for t in included], "missing": missing, "weights_known": not unknown}
