"""bench/models.py --spaces: the plain search space it writes, and a tiny run that tunes, builds and times a model
in both spaces (real tuning, two trials per task); OpenVINO beside ONNX Runtime in its table."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _times(autosched: float, ort: float, ov: float | None = None, **extra) -> dict:
    return {"autosched": autosched, "autosched_kernels": autosched / 2, "onnxruntime": ort,
            "onnxruntime_profiled": ort, "onnxruntime_kernels": ort / 2, "torch": 1.0, "untuned": 9.0,
            "sources": {"tuned": 1, "default": 1}, "borrowed_groups": 0, "max_rel_error_vs_ort": 1e-6,
            **({"openvino": ov} if ov else {}), **extra}


def _rows(*times: dict) -> list[dict]:
    return [{"model": f"m{i}", "tasks": 2, "trials": 4, "tune_s": 1.0, "threads": {"1": t}}
            for i, t in enumerate(times)]


def test_the_table_has_openvino_columns_and_geometric_means(capsys):
    bench = load_script()
    rows = _rows(_times(2.0, 1.0, 4.0), _times(2.0, 4.0, 1.0), _times(1.0, 1.0, openvino_error="RuntimeError: no"))
    lines = bench.print_table(rows, [1])
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:5]]
    assert len(lines[1].split("|")) == len(lines[0].split("|"))
    assert [c["OpenVINO ms"] for c in cells] == ["4000.000", "1000.000", "- (RuntimeError: no)"]
    assert [c["autosched / OpenVINO"] for c in cells] == ["0.50", "2.00", "-"]
    assert [c["autosched / best peer"] for c in cells] == ["2.00", "2.00", "1.00"]
    assert lines[-1] == ("geometric means at 1 thread(s) over 3 models: autosched / ORT 1.00, autosched / OpenVINO "
                         "1.00 (over the 2 it ran), autosched / best peer 1.59 (OpenVINO the faster peer for 1)")
    assert lines[-1] in capsys.readouterr().out


def test_without_openvino_the_table_has_no_openvino_column_and_says_why():
    bench = load_script()
    why = "UserInputError: comparing with OpenVINO needs the bench extra: pip install 'autosched[bench]'"
    lines = bench.print_table(_rows(_times(2.0, 1.0, openvino_error=why)), [1])
    assert "OpenVINO" not in lines[0] and len(lines[1].split("|")) == len(lines[0].split("|"))
    assert lines[-2:] == ["geometric means at 1 thread(s) over 1 models: autosched / ORT 2.00",
                          f"OpenVINO not timed: {why}"]


def test_a_model_openvino_cannot_run_is_timed_without_it(monkeypatch):
    from autosched.deploy import reference

    bench = load_script()
    want = [np.zeros(3, np.float32)]
    monkeypatch.setattr(reference, "openvino_session", lambda onnx_bytes, n: lambda feed: [np.ones(3, np.float32)])
    assert bench._openvino(b"", 1, {}, want) == (
        None, {"openvino_error": "outputs differ from ONNX Runtime's: max relative error 1.0e+00"})
    monkeypatch.setattr(reference, "openvino_session", lambda onnx_bytes, n: lambda feed: [np.zeros(3, np.float32)])
    call, notes = bench._openvino(b"", 1, {}, want)
    assert np.array_equal(call()[0], want[0]) and notes == {"max_rel_error_vs_ort[openvino]": 0.0}
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "openvino", None)  # not installed
    call, notes = bench._openvino(b"", 1, {}, want)
    assert call is None and "pip install 'autosched[bench]'" in notes["openvino_error"]


@pytest.mark.long
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
    try:
        import openvino  # noqa: F401
    except ImportError:  # an optional peer: the table says why it is missing
        assert "openvino" not in times and "OpenVINO not timed: UserInputError" in result.stdout
    else:
        assert times["openvino"] > 0 and times["max_rel_error_vs_ort[openvino]"] <= 1e-3
        assert "| autosched / OpenVINO | autosched / best peer |" in result.stdout
        [means] = [line for line in result.stdout.splitlines() if line.startswith("geometric means at 1 thread")]
        assert "autosched / OpenVINO" in means and "autosched / best peer" in means
