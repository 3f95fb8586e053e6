"""TuneConfig: unless set, a model's tasks are timed flushed at every thread count; one operator warm."""

from __future__ import annotations

import pytest

from autosched.config import TuneConfig
from autosched.errors import UserInputError
from autosched.session import make_runner


def test_a_model_is_timed_flushed_unless_a_condition_is_set(tmp_path):
    assert TuneConfig().condition == "warm" and TuneConfig().timing_condition == ""
    assert TuneConfig(n_threads=1).for_model().condition == "flush"
    assert TuneConfig(n_threads=2).for_model().condition == "flush"  # measured: neutral or faster at 2 threads
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

    def session(config, target_json, parts=None):
        seen.append(config)
        raise Stop

    monkeypatch.setattr(autosched.session, "TuningSession", session)
    with pytest.raises(Stop):
        autosched.tune_model("zoo:mlp", db=":memory:", config=TuneConfig(n_trials=1, n_threads=1))
    with pytest.raises(Stop):
        autosched.tune_model("zoo:mlp", db=":memory:", config=TuneConfig(n_trials=1, n_threads=1, flush_cache=False))
    assert [c.condition for c in seen] == ["flush", "warm"]


# --- hostile or broken config files (issue 62): one line naming the file, the problem and the fix ------------------
@pytest.mark.parametrize("content,message", [
    (b"\x00\xff\xfe\x80binary", "is not UTF-8 text"),
    (b"tune = 5\n", "tune must be a table"),
    (b"tune = [1, 2]\n", "tune must be a table"),
    (b"n_trials = 3\n[tune]\nseed = 1\n", "keys ['n_trials'] are outside its [tune] table"),
    (b"a = " + b"[" * 3000 + b"]" * 3000 + b"\n", "nests"),
    (b"a = " + b"[" * 100 + b"]" * 100 + b"\n", "nests deeper than 64 levels"),
    (b"# " + b"x" * (2 << 20) + b"\n", "larger than 1 MiB"),
])
def test_a_hostile_config_file_is_one_line(content, message, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(UserInputError) as info:
        TuneConfig.from_toml(path)
    text = str(info.value)
    assert message in text and "\n" not in text and str(path) in text


def test_a_config_at_the_top_level_or_under_tune_reads_the_same(tmp_path):
    top, table = tmp_path / "top.toml", tmp_path / "table.toml"
    top.write_text("n_trials = 7\nseed = 3\n")
    table.write_text("[tune]\nn_trials = 7\nseed = 3\n")
    assert TuneConfig.from_toml(top) == TuneConfig.from_toml(table) == TuneConfig(n_trials=7, seed=3)
