"""Build training data from tuning databases and train a cross-task cost model."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import numpy as np

from autosched._tvm import Target, load_json, load_tensor_intrins, ms
from autosched.apply import schedule_from_record
from autosched.cost.features import N_FEATURES, FeatureExtractor
from autosched.cost.xgb import XGBCostModel
from autosched.db import open_database
from autosched.errors import UserInputError
from autosched.records import Status

log = logging.getLogger("autosched.cost")


@dataclass
class Dataset:
    X: np.ndarray
    y: np.ndarray  # throughput relative to the best of its task; failures 0
    groups: np.ndarray  # one id per task
    tasks: list[str] = field(default_factory=list)  # task names, by group id
    target_family: str = ""


def task_dataset(db, row) -> tuple[np.ndarray, np.ndarray] | None:
    """Features and relative throughput of every built candidate of one task (traces replayed)."""
    mod, target = load_json(row.workload_json), Target(json.loads(row.target))
    records = [r for r in db.records(row.task_key) if r.status is not Status.INVALID and r.trace_json]
    ok = [r.latency_s for r in records if r.status is Status.OK and r.latencies_s]
    if len(ok) < 2:
        return None
    load_tensor_intrins(target)
    extractor = FeatureExtractor(ms.TuneContext(mod=mod, target=target, task_name="main"))
    schedules, lat = [], []
    for rec in records:
        try:
            schedules.append(schedule_from_record(mod, rec))
        except Exception as err:  # noqa: BLE001 - a record that no longer replays is skipped, not fatal
            log.warning("skipping a record of %s that does not replay: %s", row.name, err)
            continue
        lat.append(rec.latency_s)
    lat_arr = np.array(lat)
    y = np.where(np.isfinite(lat_arr), min(ok) / lat_arr, 0.0)
    return extractor(schedules), y


def dataset_from_databases(paths: list[str]) -> Dataset:
    Xs, ys, groups, names, families = [], [], [], [], set()
    for path in paths:
        db = open_database(path, read_only=True)  # only read: never written or migrated
        for row in db.tasks():
            part = task_dataset(db, row)
            if part is None:
                continue
            Xs.append(part[0])
            ys.append(part[1])
            groups.append(np.full(len(part[1]), len(names)))
            names.append(row.name)
            families.add(json.loads(row.target)["kind"])
        db.close()
    if not Xs:
        raise UserInputError("no task with at least 2 valid measurements in the given databases: tune some first")
    if len(families) > 1:
        raise UserInputError(f"the databases mix target kinds {sorted(families)}: train one model per kind")
    X = np.concatenate(Xs) if Xs else np.zeros((0, N_FEATURES))
    return Dataset(X, np.concatenate(ys), np.concatenate(groups), names, families.pop())


def train(data: Dataset, rounds: int = 300, seed: int = 0) -> XGBCostModel:
    return XGBCostModel(n_rounds=rounds, seed=seed, target_family=data.target_family).fit(data.X, data.y, data.groups)


def pairwise_accuracy(scores: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    """Share of same-task pairs with different true throughput that the scores order correctly."""
    right = total = 0
    for g in np.unique(groups):
        s, t = scores[groups == g], y[groups == g]
        ds, dt = s[:, None] - s[None, :], t[:, None] - t[None, :]
        mask = dt > 0
        right += int((ds[mask] > 0).sum())
        total += int(mask.sum())
    return right / total if total else float("nan")
