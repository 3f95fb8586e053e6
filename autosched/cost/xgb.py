"""XGBoost cost model: regression on throughput normalised per task (or pairwise ranking within each task),
saved as XGBoost JSON + meta."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

from autosched.cost.base import CostModel, NotFittedError
from autosched.cost.features import FEATURE_VERSION
from autosched.errors import IncompatibleArtefactError, UserInputError
from autosched.masking import mask_data, mask_secrets
from autosched.version import __version__

MODEL_FILE, META_FILE = "model.json", "meta.json"


class XGBCostModel(CostModel):
    def __init__(self, n_rounds: int = 200, max_depth: int = 6, eta: float = 0.1, seed: int = 0,
                 objective: str = "reg:squarederror", target_family: str = "llvm",
                 feature_version: str = FEATURE_VERSION, base: XGBCostModel | None = None):
        self.n_rounds, self.max_depth, self.eta, self.seed = n_rounds, max_depth, eta, seed
        self.objective, self.target_family, self.feature_version = objective, target_family, feature_version
        self.base = base  # a fitted model to continue from (transfer): its trees + trees fitted on new data

    def _params(self) -> dict[str, Any]:
        params = {"objective": self.objective, "max_depth": self.max_depth, "eta": self.eta, "seed": self.seed,
                  "nthread": 1, "verbosity": 0}
        if self.objective.startswith("rank:"):
            params["lambdarank_pair_method"] = "mean"  # all pairs, not only the top-k (float labels)
        return params

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> XGBCostModel:
        X, y, groups = np.asarray(X, float), np.asarray(y, float), np.asarray(groups)
        if X.ndim != 2 or len(X) != len(y) or len(y) != len(groups) or len(y) == 0:
            raise ValueError(f"fit needs X (n, d), y (n,), groups (n,); got {X.shape}, {y.shape}, {groups.shape}")
        order = np.argsort(groups, kind="stable")  # XGBoost wants each query group contiguous
        _, qid = np.unique(groups[order], return_inverse=True)
        data = xgb.DMatrix(X[order], label=y[order], qid=qid)
        base = self.base.booster_ if self.base is not None else None
        self.booster_ = xgb.train(self._params(), data, num_boost_round=self.n_rounds, xgb_model=base)
        self.n_samples_ = len(y) + (self.base.n_samples_ if self.base is not None else 0)
        self.n_groups_ = int(qid.max()) + 1
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "booster_"):
            raise NotFittedError("XGBCostModel.predict called before fit (or load)")
        return self.booster_.predict(xgb.DMatrix(np.asarray(X, float)))

    def save(self, path: str | Path, command: str = "", trained_on: Any = None) -> None:
        if not hasattr(self, "booster_"):
            raise NotFittedError("XGBCostModel.save called before fit")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self.booster_.save_model(folder / MODEL_FILE)
        meta = {
            "kind": "xgb", "feature_version": self.feature_version, "target_family": self.target_family,
            "n_samples": self.n_samples_, "n_groups": self.n_groups_, "xgboost_version": xgb.__version__,
            "autosched_version": __version__, "params": self._params(), "n_rounds": self.n_rounds,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": mask_secrets(command),
            "trained_on": mask_data(trained_on),
        }
        (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path, target_family: str | None = None) -> XGBCostModel:
        folder = Path(path)
        try:
            meta = json.loads((folder / META_FILE).read_text())
        except (OSError, ValueError) as err:
            raise UserInputError(f"{folder} is not a saved autosched cost model (no readable {META_FILE})") from err
        if meta.get("feature_version") != FEATURE_VERSION:
            raise IncompatibleArtefactError(
                f"cost model {folder} uses features {meta.get('feature_version')!r}, this autosched computes "
                f"{FEATURE_VERSION!r}: retrain it with autosched train-cost-model"
            )
        if target_family is not None and meta.get("target_family") != target_family:
            raise IncompatibleArtefactError(
                f"cost model {folder} was trained for {meta.get('target_family')!r} targets, not {target_family!r}: "
                "pick a model for this target or pass --no-cost-model-transfer"
            )
        model = cls(n_rounds=meta["n_rounds"], max_depth=meta["params"]["max_depth"], eta=meta["params"]["eta"],
                    seed=meta["params"]["seed"], objective=meta["params"]["objective"],
                    target_family=meta["target_family"])
        model.booster_ = xgb.Booster()
        model.booster_.load_model(folder / MODEL_FILE)
        model.n_samples_, model.n_groups_ = meta["n_samples"], meta["n_groups"]
        model.meta_ = meta
        return model


class RandomCostModel(CostModel):
    """Random scores (seeded): a baseline and a fast stand-in for tests."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> RandomCostModel:
        self.n_samples_ = len(y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "n_samples_"):
            raise NotFittedError("RandomCostModel.predict called before fit")
        return np.random.default_rng(self.seed).random(len(X))

    def save(self, path: str | Path) -> None:
        if not hasattr(self, "n_samples_"):
            raise NotFittedError("RandomCostModel.save called before fit")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / META_FILE).write_text(json.dumps({"kind": "random", "seed": self.seed,
                                                    "feature_version": FEATURE_VERSION}))
