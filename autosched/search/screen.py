"""Cost-model screening: the sampler proposes a pool, the model ranks it, the best (plus an exploration share)
are measured. The model is refitted on the task's measurements as they arrive, optionally on top of a
start model trained on other tasks (transfer)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
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
    group: Any = None  # e.g. the design it belongs to (see ModelScreen.cover)


@dataclass
class ModelScreen:
    extractor: FeatureExtractor
    start_model: CostModel | None = None  # e.g. the shipped cross-task model; None = online only
    pool_factor: int = 4  # proposals per measured candidate
    explore: float = 0.125  # share of each batch picked at random from the pool
    # exploration goes first to groups (designs) of which fewer than ``cover`` model picks were measured, each
    # its best-predicted proposal, taking up to half the batch: a model fitted on a few random measurements
    # can write off a whole design after unlucky samples (dense: design 0 holds the best kernels and its
    # 5 random settings gave 8-17 GFLOPS)
    cover: int = 2
    # ... and, as a task's search goes on, to each design with fewer than ``cover_share`` of its fair share (all
    # model picks / designs): the model can settle on one design after a few unlucky picks in another (ViT's
    # FFN matmul: 211 of 226 trials in design 1, best 3.27 ms; another run of the same search that went back
    # to design 0 found 2.54 ms)
    cover_share: float = 1 / 3
    generations: int = 2  # rounds of model-guided local search on the pool before selecting (0: none)
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

    def features(self, schedules: list[Schedule | None], keys: list[str]) -> np.ndarray:
        """Feature rows of ``keys``; a schedule already featurised under its key (then None will do) is not
        extracted again."""
        if not keys:
            return self.extractor([])
        todo = [i for i, k in enumerate(keys) if k not in self._features]
        if todo:
            X = self.extractor([schedules[i] for i in todo])
            self._features.update(zip([keys[i] for i in todo], X, strict=True))
        return np.stack([self._features[k] for k in keys])

    def has_features(self, key: str) -> bool:
        return key in self._features

    def ensure_features(self, sch: Schedule, key: str) -> None:
        """Features of a candidate measured without screening (so the online model can learn from it)."""
        if key not in self._features:
            self.features([sch], [key])

    def score(self, pool: list[Proposal]) -> None:
        """Set each proposal's predicted score (higher: predicted faster)."""
        scores = self.model.predict(np.stack([p.features for p in pool]))
        for p, s in zip(pool, scores, strict=True):
            p.score = float(s)

    def select(self, pool: list[Proposal], n: int, measured: Mapping[Any, int] | None = None) -> list[Proposal]:
        """The best half of ``n`` by predicted score; then the best-predicted proposal of each group of
        ``measured`` (group -> measured model picks so far) with fewer than ``cover_floor``, fewest first; then more
        of the best, leaving an ``explore`` share for random picks from the rest."""
        self.score(pool)
        ranked = sorted(pool, key=lambda p: -p.score)
        n = min(n, len(ranked))
        chosen = ranked[: n // 2]
        chosen += self._cover(ranked[n // 2 :], n - n // 2, measured or {}, chosen)
        taken = {id(p) for p in chosen}
        rest = [p for p in ranked if id(p) not in taken]
        n_explore = min(int(round(self.explore * n)), len(ranked) - n)
        n_best = max(n - n_explore - len(chosen), 0)
        chosen, rest = chosen + rest[:n_best], rest[n_best:]
        picks = self._rng.choice(len(rest), size=n - len(chosen), replace=False) if len(chosen) < n else []
        return chosen + [rest[i] for i in sorted(picks)]

    def cover_floor(self, measured: Mapping[Any, int], batch: int = 0) -> float:
        """Model picks each group (design) of ``measured`` should have once a batch of ``batch`` is measured."""
        if not measured:
            return self.cover
        return max(self.cover, self.cover_share * (sum(measured.values()) + batch) / len(measured))

    def _cover(self, ranked: list[Proposal], n: int, measured: Mapping[Any, int],
               chosen: list[Proposal]) -> list[Proposal]:
        """Up to ``n`` of ``ranked``: the best of each group of ``measured`` with fewer picks than
        ``cover_floor`` (measured ones plus those already ``chosen``), fewest first."""
        counts = Counter(measured) + Counter(p.group for p in chosen if p.group in measured)
        floor = self.cover_floor(measured, n + len(chosen))
        by_group: dict[Any, list[Proposal]] = {}  # group -> its proposals, best predicted first
        for p in ranked:
            if p.group in measured:
                by_group.setdefault(p.group, []).append(p)
        picks: list[Proposal] = []
        while len(picks) < n:
            needy = [g for g, props in by_group.items() if props and counts[g] < floor]
            if not needy:
                break
            group = min(needy, key=lambda g: (counts[g], -by_group[g][0].score))
            picks.append(by_group[group].pop(0))
            counts[group] += 1
        return picks

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
