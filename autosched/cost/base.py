"""The CostModel interface (scikit-learn contract: the constructor only stores arguments, learned
attributes end in ``_``) and the errors of persisted models."""

from __future__ import annotations

import abc
from pathlib import Path

import numpy as np

from autosched.errors import AutoschedError


class NotFittedError(AutoschedError):
    """predict() or save() before fit()."""


class CostModel(abc.ABC):
    """Scores candidates: higher means faster. Trained per task group (``groups``), so it ranks."""

    @abc.abstractmethod
    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> CostModel:
        """X: (n, d) features; y: normalised throughput in [0, 1] (best of its group = 1, failures 0)."""

    @abc.abstractmethod
    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n,) scores; only their order within one task matters."""

    @abc.abstractmethod
    def save(self, path: str | Path) -> None:
        """A folder with the model (XGBoost JSON, never a pickle) and ``meta.json``."""

    @property
    def is_fitted(self) -> bool:
        return any(k.endswith("_") and not k.startswith("_") for k in vars(self))
