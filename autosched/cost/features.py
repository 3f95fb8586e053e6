"""Program features of scheduled candidates, transferable between tasks.

TVM's per-store feature extractor (164 values per buffer store of the lowered program: loop structure,
vectorisation, parallelism, memory access and reuse, arithmetic intensity) aggregated to one row per
candidate. ``FEATURE_VERSION`` is stored with every model; change it whenever the columns change.
"""

from __future__ import annotations

import numpy as np

from autosched._tvm import Schedule, ms

FEATURE_VERSION = "per-store-164:max,mean,log-n-stores:v1"
N_PER_STORE = 164
N_FEATURES = 2 * N_PER_STORE + 1


class FeatureExtractor:
    """Features for schedules of one task (``context``: the space's MetaSchedule TuneContext)."""

    def __init__(self, context: ms.TuneContext):
        self._context = context
        self._extractor = ms.feature_extractor.PerStoreFeature()
        self._args = ms.arg_info.ArgInfo.from_prim_func(context.mod["main"])

    def __call__(self, schedules: list[Schedule]) -> np.ndarray:
        if not schedules:
            return np.zeros((0, N_FEATURES))
        cands = [ms.MeasureCandidate(sch, self._args) for sch in schedules]
        per_store = self._extractor.extract_from(self._context, cands)
        return np.stack([aggregate(f.numpy()) for f in per_store])


def aggregate(rows: np.ndarray) -> np.ndarray:
    """(n_stores, 164) -> (329,): column max, column mean, log(1 + n_stores)."""
    if rows.shape[0] == 0:
        return np.zeros(N_FEATURES)
    return np.concatenate([rows.max(axis=0), rows.mean(axis=0), [np.log1p(rows.shape[0])]])
