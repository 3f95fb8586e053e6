"""The parts of a run as objects: a user's Optuna sampler, runner, cost model and callbacks reach the search."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

import autosched
from autosched.config import TuneConfig
from autosched.cost.base import CostModel
from autosched.errors import UserInputError
from autosched.measure.local import LocalRunner
from autosched.parts import parts_of


class CountingSampler(optuna.samplers.RandomSampler):
    def __init__(self) -> None:
        super().__init__(seed=3)
        self.n_sampled = 0

    def sample_independent(self, study, trial, param_name, param_distribution):
        self.n_sampled += 1
        return super().sample_independent(study, trial, param_name, param_distribution)


class CountingRunner(LocalRunner):
    def __init__(self) -> None:
        super().__init__(1)
        self.n_timed = self.n_closed = 0

    def close(self):
        self.n_closed += 1
        super().close()

    def run(self, builds, io):
        self.n_timed += len(builds)
        return super().run(builds, io)


class ConstantModel(CostModel):
    """Scores every candidate the same; counts how often it is asked."""

    def __init__(self) -> None:
        self.n_predicted = 0
        self.fitted_ = True

    def fit(self, X, y, groups):
        return self

    def predict(self, X):
        self.n_predicted += len(X)
        return np.zeros(len(X))

    def save(self, path):
        raise NotImplementedError


@pytest.mark.slow
def test_a_users_sampler_runner_cost_model_and_callbacks_are_the_ones_used(tmp_path):
    sampler, runner, model, events = CountingSampler(), CountingRunner(), ConstantModel(), []
    try:
        result = autosched.tune_operator("matmul", (16, 16, 16), db=str(tmp_path / "t.db"),
                                         config=TuneConfig(n_trials=6, n_threads=1, batch_size=3), sampler=sampler,
                                         runner=runner, cost_model=model, callbacks=[events.append])
        assert result.n_new >= 1 and result.best is not None
        assert sampler.n_sampled > 0 and model.n_predicted > 0
        assert runner.n_timed >= result.n_new  # every candidate was timed by the user's runner
        assert events and events[-1].n_done == result.n_new  # progress reached the callback
        assert runner.n_closed == 0  # the runner is the user's: the run does not close it
    finally:
        runner.close()


def test_names_go_to_the_config_and_wrong_objects_are_refused_in_one_line():
    config, parts = parts_of(TuneConfig(), sampler="random", cost_model="none")
    assert (config.sampler, config.cost_model, parts.sampler, parts.cost_model) == ("random", "none", None, None)
    made = optuna.samplers.TPESampler(seed=1)
    _, parts = parts_of(TuneConfig(), sampler=lambda task: made)
    assert parts.sampler_for(object()) is made
    with pytest.raises(UserInputError, match="sampler: int is not an Optuna sampler"):
        parts_of(TuneConfig(), sampler=42)
    with pytest.raises(UserInputError, match="runner: str is not an autosched.measure.Runner"):
        parts_of(TuneConfig(), runner="local")
    with pytest.raises(UserInputError, match="cost_model: dict is not an autosched.cost.CostModel"):
        parts_of(TuneConfig(), cost_model={})
    with pytest.raises(UserInputError, match="callbacks: every callback must be callable"):
        parts_of(TuneConfig(), callbacks=[1])
    _, parts = parts_of(TuneConfig(), sampler=lambda task: "tpe")
    with pytest.raises(UserInputError, match="the callable returned str"):
        parts.sampler_for(object())
