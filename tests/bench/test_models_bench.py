"""bench/models.py --spaces: the plain search space it writes, and a tiny run that tunes, builds and times a model
in both spaces (real tuning, two trials per task)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autosched.spaces.settings import SEARCH_SPACES_ENV, load_settings, settings_for
from autosched.tasks import make_target

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "models.py"


def load_script():
    spec = importlib.util.spec_from_file_location("models_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plain_space_drops_fast_math_and_the_epilogue_filter_only(tmp_path):
    bench = load_script()
    target = make_target("llvm", 1)
    shipped = settings_for(target)
    assert shipped.fast_math and shipped.fuse_epilogues  # else there is no "before" to compare with
    plain = load_settings(bench.write_plain_search_spaces(tmp_path / "plain") / "cpu.toml")
    assert plain.fast_math == () and not plain.fuse_epilogues
    assert plain.version == shipped.version + 1000
    assert (plain.rules, plain.postprocs, plain.checks) == (shipped.rules, shipped.postprocs, shipped.checks)
    assert (tmp_path / "plain" / "cuda.toml").exists()


def test_search_spaces_sets_and_restores_the_environment(tmp_path, monkeypatch):
    bench = load_script()
    monkeypatch.delenv(SEARCH_SPACES_ENV, raising=False)
    target = make_target("llvm", 1)
    with bench.search_spaces("plain", tmp_path):
        assert settings_for(target).fast_math == ()
    assert SEARCH_SPACES_ENV not in os.environ
    assert settings_for(target).fast_math
    monkeypatch.setenv(SEARCH_SPACES_ENV, str(tmp_path / "mine"))  # a folder of the caller's own
    with bench.search_spaces("shipped", tmp_path):
        assert settings_for(target).fast_math  # the shipped files, not the caller's
    assert os.environ[SEARCH_SPACES_ENV] == str(tmp_path / "mine")


@pytest.mark.slow
def test_a_tiny_run_times_both_spaces(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("threadpoolctl")  # the benchmarks' own extra (.[bench])
    out = "test_models_spaces"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--models", "mlp", "--trials", "2", "--threads", "1", "--repeat", "3",
         "--spaces", "shipped,plain", "--no-torch-compile", "--out", out, "--db-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    written = SCRIPT.parent / "results" / f"{out}.json"
    try:
        row = json.loads(written.read_text())["rows"][0]
    finally:
        written.unlink(missing_ok=True)
    times = row["threads"]["1"]
    assert times["autosched"] > 0 and times["autosched[plain]"] > 0
    assert times["max_rel_error_vs_ort[autosched[plain]]"] <= 1e-3
    assert row["spaces"]["plain"]["trials"] > 0
    assert "plain / shipped" in result.stdout
