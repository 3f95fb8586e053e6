"""Contract tests for every cost model, plus XGBoost specifics (versions, transfer, ranking)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autosched.cost import COST_MODELS, NotFittedError, RandomCostModel, XGBCostModel, create_cost_model
from autosched.cost.features import FEATURE_VERSION, N_FEATURES, FeatureExtractor
from autosched.cost.training import pairwise_accuracy
from autosched.errors import IncompatibleArtefactError, UnknownNameError


def _data(n=120, seed=0):
    """Two tasks whose throughput depends on feature 0 (monotone) and noise elsewhere."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 12))
    y = X[:, 0] ** 2
    groups = np.repeat([0, 1], n // 2)
    return X, y / y.max(), groups


@pytest.fixture(params=sorted(COST_MODELS))
def model(request):
    return create_cost_model(request.param, seed=3)


def test_fit_predict_shapes(model):
    X, y, g = _data()
    assert model.fit(X, y, g) is model and model.is_fitted
    assert model.predict(X[:7]).shape == (7,)


def test_not_fitted_errors(model, tmp_path):
    assert not model.is_fitted
    with pytest.raises(NotFittedError):
        model.predict(np.zeros((2, 12)))
    with pytest.raises(NotFittedError):
        model.save(tmp_path / "m")


def test_same_seed_same_ranking(model):
    X, y, g = _data()
    name = type(model)
    a = name(seed=5).fit(X, y, g).predict(X)
    b = name(seed=5).fit(X, y, g).predict(X)
    assert np.array_equal(np.argsort(a), np.argsort(b))


def test_save_writes_json_never_a_pickle(model, tmp_path):
    X, y, g = _data()
    model.fit(X, y, g).save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["feature_version"] == FEATURE_VERSION
    assert not list((tmp_path / "m").glob("*.pkl"))


def test_xgb_round_trip_predicts_the_same(tmp_path):
    X, y, g = _data()
    m = XGBCostModel(n_rounds=30).fit(X, y, g)
    m.save(tmp_path / "m", command="autosched train-cost-model ...")
    loaded = XGBCostModel.load(tmp_path / "m", "llvm")
    np.testing.assert_allclose(loaded.predict(X), m.predict(X), rtol=1e-6)
    meta = loaded.meta_
    assert meta["n_samples"] == len(y) and meta["xgboost_version"] and meta["command"].startswith("autosched")


def test_xgb_learns_the_ranking():
    X, y, g = _data(400)
    m = XGBCostModel(n_rounds=60).fit(X[:300], y[:300], g[:300])
    assert pairwise_accuracy(m.predict(X[300:]), y[300:], g[300:]) > 0.85


def test_refuses_another_feature_version_or_target_family(tmp_path):
    X, y, g = _data()
    XGBCostModel(n_rounds=5).fit(X, y, g).save(tmp_path / "m")
    with pytest.raises(IncompatibleArtefactError, match="trained for 'llvm' targets, not 'cuda'"):
        XGBCostModel.load(tmp_path / "m", "cuda")
    meta_path = tmp_path / "m" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["feature_version"] = "per-store-old"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(IncompatibleArtefactError, match="uses features 'per-store-old'"):
        XGBCostModel.load(tmp_path / "m")


def test_transfer_continues_from_the_base_model():
    X, y, g = _data()
    base = XGBCostModel(n_rounds=20).fit(X, y, g)
    tuned = XGBCostModel(n_rounds=5, base=base).fit(X[:10], y[:10], np.zeros(10))
    assert tuned.booster_.num_boosted_rounds() == 25 and tuned.n_samples_ == len(y) + 10


def test_unknown_cost_model_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match="random, xgb"):
        create_cost_model("mlp")
    assert isinstance(create_cost_model(RandomCostModel(1)), RandomCostModel)


def test_pairwise_accuracy_counts_same_task_pairs_only():
    y = np.array([1.0, 0.5, 0.2, 1.0, 0.1])
    groups = np.array([0, 0, 0, 1, 1])
    assert pairwise_accuracy(y, y, groups) == 1.0
    assert pairwise_accuracy(-y, y, groups) == 0.0


def test_features_of_real_schedules(matmul_space):
    extractor = FeatureExtractor(matmul_space.context)
    schedules = [matmul_space.apply(matmul_space.default_params(d)) for d in range(len(matmul_space.designs))]
    X = extractor(schedules)
    assert X.shape == (len(schedules), N_FEATURES) and np.isfinite(X).all()
    assert len({tuple(row) for row in X}) > 1  # different schedules, different features
