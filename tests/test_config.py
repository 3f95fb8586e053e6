"""TuneConfig: unless set, the cache-flush switch is on for a model's tasks at 1 thread, else off."""

from __future__ import annotations

import pytest

from autosched.config import TuneConfig
from autosched.errors import UserInputError
from autosched.session import make_runner


def test_a_model_at_one_thread_is_timed_flushed_unless_a_condition_is_set(tmp_path):
    assert TuneConfig().condition == "warm" and TuneConfig().timing_condition == ""
    assert TuneConfig(n_threads=1).for_model().condition == "flush"
    assert TuneConfig(n_threads=1, timing_condition="rotate").for_model().condition == "rotate"  # set: kept
    assert TuneConfig(n_threads=1, flush_cache=False).for_model().condition == "warm"  # the older name, kept
    assert TuneConfig(n_threads=4, flush_cache=True).for_model().condition == "flush"
    path = tmp_path / "warm.toml"
    path.write_text("[tune]\nflush_cache = false\nn_threads = 1\n")
    assert TuneConfig.from_toml(path).for_model().condition == "warm"
    path.write_text('[tune]\ntiming_condition = "rotate"\n')
    assert TuneConfig.from_toml(path).for_model().condition == "rotate"
    with pytest.raises(UserInputError, match="flush_cache must be true or false"):
        TuneConfig(flush_cache="yes")
    with pytest.raises(UserInputError, match="timing_condition must be one of warm, flush, rotate"):
        TuneConfig(timing_condition="cold")


def test_an_operator_is_timed_warm_and_a_model_at_one_thread_cold():
    assert make_runner(TuneConfig(n_threads=1)).condition == "warm"
    assert make_runner(TuneConfig(n_threads=1).for_model()).condition == "flush"


def test_tune_model_tunes_with_the_model_config(monkeypatch):
    import autosched
    import autosched.session

    seen = []

    class Stop(Exception):
        pass

    def session(config, target_json):
        seen.append(config)
        raise Stop

    monkeypatch.setattr(autosched.session, "TuningSession", session)
    with pytest.raises(Stop):
        autosched.tune_model("zoo:mlp", db=":memory:", config=TuneConfig(n_trials=1, n_threads=1))
    with pytest.raises(Stop):
        autosched.tune_model("zoo:mlp", db=":memory:", config=TuneConfig(n_trials=1, n_threads=1, flush_cache=False))
    assert [c.condition for c in seen] == ["flush", "warm"]
