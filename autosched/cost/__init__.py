"""Cost models: rank proposed candidates so that measurements go where they pay."""

from __future__ import annotations

from autosched.cost.base import CostModel, NotFittedError
from autosched.cost.features import FEATURE_VERSION, FeatureExtractor
from autosched.cost.xgb import RandomCostModel, XGBCostModel
from autosched.errors import UnknownNameError

COST_MODELS = {"xgb": XGBCostModel, "random": RandomCostModel}


def create_cost_model(name: str | CostModel, **kwargs) -> CostModel:
    if isinstance(name, CostModel):
        return name
    if name not in COST_MODELS:
        raise UnknownNameError("cost model", name, list(COST_MODELS))
    return COST_MODELS[name](**kwargs)


__all__ = ["COST_MODELS", "FEATURE_VERSION", "CostModel", "FeatureExtractor", "NotFittedError", "RandomCostModel",
           "XGBCostModel", "create_cost_model"]
