"""Cost-model screening: the sampler proposes a pool, the model ranks it, the best (plus an exploration share)
are measured. The model is refitted on the task's measurements as they arrive, optionally on top of a
start model trained on other tasks (transfer)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosched._tvm import Schedule
from autosched.cost.base import CostModel
from autosched.cost.features import FeatureExtractor
from autosched.cost.xgb import XGBCostModel
from autosched.records import MeasureResult

log = logging.getLogger("autosched.search")


@dataclass
class Proposal:
    params: dict[str, Any]
    key: str
    features: np.ndarray
    score: float = float("nan")


@dataclass
class ModelScreen:
    extractor: FeatureExtractor
    start_model: CostModel | None = None  # e.g. the shipped cross-task model; None = online only
    pool_factor: int = 4  # proposals per measured candidate
    explore: float = 0.25  # share of each batch picked at random from the rest of the pool
    min_train: int = 16  # measurements before an online-only model starts screening
    n_rounds: int = 40  # boosting rounds per refit
    online: bool = True  # refit on this task's measurements as they arrive
    seed: int = 0
    model: CostModel | None = None
    _features: dict[str, np.ndarray] = field(default_factory=dict)
    _results: dict[str, MeasureResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model = self.model or self.start_model
        self._rng = np.random.default_rng(self.seed)

    @property
    def ready(self) -> bool:
        return self.model is not None

    def features(self, schedules: list[Schedule], keys: list[str]) -> np.ndarray:
        X = self.extractor(schedules)
        self._features.update(zip(keys, X, strict=True))
        return X

    def ensure_features(self, sch: Schedule, key: str) -> None:
        """Features of a candidate measured without screening (so the online model can learn from it)."""
        if key not in self._features:
            self.features([sch], [key])

    def select(self, pool: list[Proposal], n: int) -> list[Proposal]:
        """Top ``n - n_explore`` by predicted score, then ``n_explore`` at random from the rest."""
        scores = self.model.predict(np.stack([p.features for p in pool]))
        for p, s in zip(pool, scores, strict=True):
            p.score = float(s)
        ranked = sorted(pool, key=lambda p: -p.score)
        n_explore = min(int(round(self.explore * n)), max(len(ranked) - n, 0))
        chosen, rest = ranked[: n - n_explore], ranked[n - n_explore :]
        picks = self._rng.choice(len(rest), size=n_explore, replace=False) if n_explore else []
        return chosen + [rest[i] for i in sorted(picks)]

    def observe(self, keys: list[str], results: list[MeasureResult]) -> None:
        """Record results and refit: targets are throughput relative to the task's best (failures: 0)."""
        self._results.update(zip(keys, results, strict=True))
        if not self.online:
            return
        known = [k for k in self._results if k in self._features]
        if len(known) < (1 if self.start_model is not None else self.min_train):
            return
        lat = np.array([self._results[k].latency_s for k in known])
        best = lat[np.isfinite(lat)].min() if np.isfinite(lat).any() else 1.0
        y = np.where(np.isfinite(lat), best / lat, 0.0)
        X = np.stack([self._features[k] for k in known])
        base = self.start_model if isinstance(self.start_model, XGBCostModel) else None
        self.model = XGBCostModel(n_rounds=self.n_rounds, seed=self.seed, base=base).fit(X, y, np.zeros(len(y)))
