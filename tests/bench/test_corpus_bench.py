"""bench/corpus.py: a tiny row tuned and timed, then timed again with --retime from the database it left; OpenVINO
beside ONNX Runtime (its column, its ratios, and a row that goes on without it)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "corpus.py"


OPTIONAL = "OpenVINO is optional (the bench extra): pip install 'autosched[bench]'"


def corpus(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def load_script():
    spec = importlib.util.spec_from_file_location("corpus_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_paired_ratio_is_the_median_of_each_rounds_ratio():
    bench = load_script()
    # a slow spell in round 2 slows both: the ratio of the medians (4/2) says 2.0, the rounds say 1.0
    assert bench.paired_ratio([1.0, 4.0, 8.0], [1.0, 4.0, 2.0]) == 1.0


def test_the_best_peer_is_the_faster_of_onnx_runtime_and_openvino():
    bench = load_script()
    rounds = {"autosched": [2.0, 2.0, 2.0], "onnxruntime": [1.0, 4.0, 4.0], "openvino": [3.0, 1.0, 2.0],
              "torch": [9.0, 9.0, 9.0]}
    ratios = bench.peer_ratios(rounds)
    assert (ratios["autosched_vs_ort"], ratios["autosched_vs_ov"]) == (0.5, 1.0)
    assert ratios["best_peer"] == "openvino" and ratios["autosched_vs_best_peer"] == 1.0  # medians 4 vs 2
    assert ratios["autosched_vs_best_peer_paired"] == 2.0  # each round's faster: 1, 1, 2
    # OpenVINO not timed: ONNX Runtime is the best peer, and there is no OpenVINO ratio
    without = bench.peer_ratios({k: v for k, v in rounds.items() if k != "openvino"})
    assert without["best_peer"] == "onnxruntime" and without["autosched_vs_best_peer"] == 0.5
    assert "autosched_vs_ov" not in without


def _row(model: str, autosched: float, ort: float, ov: float | None = None, **extra) -> dict:
    rounds = {"autosched": [autosched] * 5, "onnxruntime": [ort] * 5, **({"openvino": [ov] * 5} if ov else {})}
    bench = load_script()
    return {"model": model, "family": "cnn", "library": "torchvision", "ok": True, "path": "onnx", "tasks": 3,
            "tasks_tuned": 0, "fusion_groups": 3, "autosched_s": autosched, "onnxruntime_s": ort, "torch_s": 1.0,
            "max_rel_error_vs_ort": 1e-6, "rounds_s": rounds, **({"openvino_s": ov} if ov else {}),
            **bench.peer_ratios(rounds), **extra}


def _columns(table) -> dict[str, list[str]]:
    return {c.header: [str(cell) for cell in c.cells] for c in table.columns}


def test_the_table_has_openvino_columns_and_geometric_means():
    bench = load_script()
    rows = [_row("a", 2.0, 1.0, 4.0), _row("b", 2.0, 4.0, 1.0),
            _row("c", 1.0, 1.0, openvino_error="RuntimeError: no such [operator]")]
    columns = _columns(bench.corpus_table(rows))
    assert columns["OpenVINO ms"] == ["4000.000", "1000.000", "- (RuntimeError: no such \\[operator])"]
    assert columns["autosched/OV"] == ["0.50", "2.00", "-"]
    assert columns["autosched/best peer"] == ["2.00", "2.00", "1.00"]
    assert columns["autosched/ORT"] == ["2.00", "0.50", "1.00"]
    lines = bench.summary_lines(rows)
    assert lines[1] == "geometric mean of autosched / OpenVINO latency over the 2 models OpenVINO ran: 1.00 " \
                       "(median of paired rounds: 1.00); not run by OpenVINO: c (RuntimeError: no such [operator])"
    # best peers: ONNX Runtime 1.0 for a (2.0), OpenVINO 1.0 for b (2.0), ONNX Runtime for c (1.0): (2 * 2 * 1)^(1/3)
    assert lines[2].startswith("geometric mean of autosched / best peer (the faster of ONNX Runtime and OpenVINO per "
                               "model: OpenVINO for 1, ONNX Runtime for 2) over the 3 models that ran: 1.59")


def test_without_openvino_the_table_has_no_openvino_column_and_says_why(capsys):
    bench = load_script()
    why = "UserInputError: comparing with OpenVINO needs the bench extra: pip install 'autosched[bench]'"
    rows = [_row("a", 2.0, 1.0, openvino_error=why)]
    assert not [c for c in _columns(bench.corpus_table(rows)) if "OV" in c]
    lines = bench.print_table(rows).splitlines()
    out = capsys.readouterr().out
    assert "OpenVINO" not in out.split("geometric mean")[0]  # neither in the table nor in its title
    assert lines[0].startswith("geometric mean of autosched / ONNX Runtime latency over the 1 models that ran: 2.00")
    assert lines[1:] == [f"OpenVINO not timed: {why}"]
    assert lines[1] in out  # printed as it is (not read as rich markup)


def test_a_model_openvino_cannot_run_is_a_note_in_its_row(monkeypatch, tmp_path):
    from autosched.deploy import reference

    bench = load_script()

    def cannot(path, n_threads):
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:\nCannot create Foo layer: unsupported")

    monkeypatch.setattr(reference, "openvino_session", cannot)
    row: dict = {}
    assert bench._peer_openvino(row, tmp_path / "m.onnx", {}, [], 1) is None
    assert row["openvino_error"] == "RuntimeError: Cannot create Foo layer: unsupported"
    assert "openvino_s" not in row  # the step's time has a name of its own: openvino_s is the timed median

    monkeypatch.setattr(reference, "openvino_session", lambda path, n: lambda feed: [np.ones(3, np.float32)])
    row = {}
    assert bench._peer_openvino(row, tmp_path / "m.onnx", {}, [np.zeros(3, np.float32)], 1) is None
    assert row["openvino_error"].endswith("outputs differ from ONNX Runtime's: max relative error 1.0e+00")

    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "openvino", None)  # not installed
    row = {}
    assert bench._peer_openvino(row, tmp_path / "m.onnx", {}, [], 1) is None
    assert "pip install 'autosched[bench]'" in row["openvino_error"]


@pytest.mark.long
@pytest.mark.slow
def test_openvino_is_timed_beside_onnx_runtime_in_the_same_rounds(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("threadpoolctl")  # the benchmarks' own extra (.[bench])
    pytest.importorskip("openvino", reason=OPTIONAL)
    result = corpus("--models", "squeezenet1_0", "--size", "small", "--trials", "0", "--threads", "1",
                    "--repeat", "5", "--min-round-s", "0.02", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    payload = json.loads((tmp_path / "out.json").read_text())
    [row] = payload["rows"]
    assert row["ok"] and payload["openvino"]
    assert row["openvino_max_rel_error_vs_ort"] <= 1e-3 and len(row["rounds_s"]["openvino"]) == 5
    assert row["openvino_s"] > 0 and row["autosched_vs_ov"] == row["autosched_s"] / row["openvino_s"]
    best = min(row["onnxruntime_s"], row["openvino_s"])
    assert row["autosched_vs_best_peer"] == row["autosched_s"] / best and row["autosched_vs_best_peer_paired"] > 0
    assert "(vs ONNX Runtime and OpenVINO)" in result.stdout
    assert "geometric mean of autosched / OpenVINO latency over the 1 models OpenVINO ran" in payload["summary"]
    assert "geometric mean of autosched / best peer" in payload["summary"]


def test_retime_needs_the_databases_folder():
    result = corpus("--retime", "--models", "squeezenet1_0", timeout=120)
    assert result.returncode != 0
    assert "--retime needs --db-dir" in result.stderr


def test_retime_without_a_finished_row_says_what_to_do(tmp_path):
    pytest.importorskip("threadpoolctl")  # the benchmarks' own extra (.[bench]): the script reads the machine first
    result = corpus("--retime", "--models", "squeezenet1_0", "--size", "small", "--db-dir", str(tmp_path),
                    "--out", str(tmp_path / "out"), timeout=120)
    assert result.returncode != 0
    assert "needs its finished row" in result.stderr and "tune it first" in result.stderr
    assert not list(tmp_path.rglob("*.row.json"))


@pytest.mark.long
@pytest.mark.slow
def test_a_tuned_row_is_timed_again_from_its_database(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("threadpoolctl")  # the benchmarks' own extra (.[bench])
    common = ["--models", "squeezenet1_0", "--size", "small", "--threads", "1", "--db-dir", str(tmp_path / "work"),
              "--rows-dir", str(tmp_path / "rows"), "--out", str(tmp_path / "out")]
    tuned = corpus(*common, "--trials", "2")
    assert tuned.returncode == 0, tuned.stderr[-2000:]
    [row_file] = (tmp_path / "rows").rglob("squeezenet1_0.t1.small.row.json")
    first = json.loads(row_file.read_text())
    assert first["ok"] and first["tasks_tuned"] > 0

    again = corpus(*common, "--retime")
    assert again.returncode == 0, again.stderr[-2000:]
    row = json.loads(row_file.read_text())
    assert row["ok"] and row["timed_commit"]
    # what the tuning run measured stays; the timing is new, and the first one is kept beside it
    assert (row["tune_s"], row["trials"], row["commit"], row["measured_at"]) == (
        first["tune_s"], first["trials"], first["commit"], first["measured_at"])
    assert (row["tasks"], row["tasks_tuned"]) == (first["tasks"], first["tasks_tuned"])
    assert row["first_timing"]["autosched_s"] == first["autosched_s"]
    assert row["autosched_s"] != first["autosched_s"] and row["max_rel_error_vs_ort"] <= 1e-3
    assert len(row["rounds_s"]["autosched"]) == 11 and row["autosched_vs_ort_paired"] > 0
    assert "first timing" in again.stdout
    assert json.loads((tmp_path / "out.json").read_text())["rows"][0]["timed_commit"] == row["timed_commit"]
