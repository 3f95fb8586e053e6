"""bench/corpus.py: a tiny row tuned and timed, then timed again with --retime from the database it left."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "corpus.py"


def corpus(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_the_paired_ratio_is_the_median_of_each_rounds_ratio():
    spec = importlib.util.spec_from_file_location("corpus_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # a slow spell in round 2 slows both: the ratio of the medians (4/2) says 2.0, the rounds say 1.0
    assert bench.paired_ratio([1.0, 4.0, 8.0], [1.0, 4.0, 2.0]) == 1.0


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
