"""bench/torch_backend.py --small: a tiny CNN through eager PyTorch, Inductor and the autosched backend (half a
minute of tuning, enough to measure every task), outputs checked, then a second process on the same database that
tunes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "torch_backend.py"


@pytest.mark.long
@pytest.mark.slow
def test_the_small_dry_run_times_every_peer_and_the_rerun_tunes_nothing(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "torch_backend.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--small", "--models", "tiny_cnn", "--time", "30s",
                           "--db-dir", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tiny_cnn" in done.stdout and "rerun" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["reuse"]) for r in rows] == [("tiny_cnn", False), ("tiny_cnn", True)]
    first, rerun = rows
    assert set(first["peers"]) == set(rerun["peers"]) == {"eager", "inductor", "autosched"}
    for row in rows:
        for name, peer in row["peers"].items():
            assert "error" in peer or (peer["ok"] and peer["latency_s"] > 0 and peer["first_call_s"] > 0), name
    assert first["peers"]["autosched"]["graphs"][0]["n_new_records"] > 0
    [graph] = rerun["peers"]["autosched"]["graphs"]
    assert graph["mode"] == "autosched" and graph["n_tuned"] == 0 and graph["n_new_records"] == 0
