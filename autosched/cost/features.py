"""Program features of scheduled candidates, transferable between tasks.

TVM's per-store feature extractor (164 values per buffer store of the lowered program: loop structure,
vectorisation, parallelism, memory access and reuse, arithmetic intensity) aggregated to one row per
candidate: the two stores with the most floating-point work (the compute blocks), the log of the column
sums over all stores, and the log of the number of stores. ``FEATURE_VERSION`` is stored with every model;
change it whenever the columns change. (Leave-one-task-out pairwise accuracy on the shipped training data:
0.76 median (0.73 mean) with this aggregation, 0.69 with column max + mean.)
"""

from __future__ import annotations

import numpy as np

from autosched._tvm import Schedule, ms

FEATURE_VERSION = "per-store-164:top2-float-ops,log-sum,log-n-stores:v2"
N_PER_STORE = 164
N_TOP = 2
N_FEATURES = (N_TOP + 1) * N_PER_STORE + 1
N_FLOAT_OP_COLUMNS = 7  # float mad, add/sub, mul, div/mod, compare, math functions, other


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
    """(n_stores, 164) -> (493,): the 2 stores with most float work, log column sums, log(1 + n_stores).

    Per-store values are already log-scaled (log2(1 + x)) by TVM: the sums are taken in linear space."""
    if rows.shape[0] == 0:
        return np.zeros(N_FEATURES)
    top = np.zeros((N_TOP, rows.shape[1]))
    order = np.argsort(-rows[:, :N_FLOAT_OP_COLUMNS].sum(axis=1), kind="stable")[:N_TOP]
    top[: len(order)] = rows[order]
    log_sum = np.log2(1 + (np.exp2(np.clip(rows, 0, 60)) - 1).sum(axis=0))
    return np.concatenate([top.ravel(), log_sum, [np.log1p(rows.shape[0])]])
