"""bench/trial_rate.py: trials of one task timed, with each trial's search, build and run time summed."""

from __future__ import annotations

import argparse

import pytest


@pytest.mark.slow
def test_a_repeat_times_the_trials_after_the_warmup_and_splits_their_time(tmp_path, mlp_onnx, load_bench):
    import autosched

    task = max(autosched.extract_model_tasks(str(mlp_onnx), "llvm", n_threads=1), key=lambda t: t.flops)
    bench = load_bench("trial_rate")
    args = argparse.Namespace(threads=1, seed=0, warmup=2, trials=3)
    row = bench.one_repeat(task, None, tmp_path, args, 0)
    assert row["trials"] == 3 and row["best_us"] > 0
    parts = sum(row[f"{p}_s_per_trial"] for p in bench.PARTS)
    assert 0 < parts <= row["s_per_trial"] * 1.05  # the parts are what the wall time was spent on
    assert row["measure_s_per_trial"] > 0 and row["build_s_per_trial"] > 0
    assert bench.autosched_commit() != "unknown"


@pytest.mark.parametrize("argv,message", [
    (["--db", "no/such.db"], "--db no/such.db: no such file"),
    (["--model", "no/such.onnx"], "--model no/such.onnx: no such file"),
])
def test_a_missing_file_is_a_one_line_error_before_any_work(load_bench, argv, message):
    bench = load_bench("trial_rate")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--model", "resnet50", "--task", "x", *argv])
    assert str(exit_.value).startswith(message) and "\n" not in str(exit_.value)
