"""bench/trial_rate.py: trials of one task timed, with each trial's search, build and run time summed."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "trial_rate.py"


def load_script():
    spec = importlib.util.spec_from_file_location("trial_rate_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_repeat_times_the_trials_after_the_warmup_and_splits_their_time(tmp_path):
    pytest.importorskip("torch")
    import autosched

    model = autosched.load_model("zoo:mlp")
    (tmp_path / "mlp.onnx").write_bytes(model.onnx_bytes)
    task = max(autosched.extract_model_tasks(str(tmp_path / "mlp.onnx"), "llvm", n_threads=1),
               key=lambda t: t.flops)
    bench = load_script()
    args = argparse.Namespace(threads=1, seed=0, warmup=2, trials=3)
    row = bench.one_repeat(task, None, tmp_path, args, 0)
    assert row["trials"] == 3 and row["best_us"] > 0
    parts = sum(row[f"{p}_s_per_trial"] for p in bench.PARTS)
    assert 0 < parts <= row["s_per_trial"] * 1.05  # the parts are what the wall time was spent on
    assert row["measure_s_per_trial"] > 0 and row["build_s_per_trial"] > 0
    assert bench.autosched_commit() != "unknown"
