"""bench/inmodel.py: a tuned model's kernels timed inside it (the VM's instrument hook) and matched with their
database records, on a tiny real model (two trials per task)."""

from __future__ import annotations

import pytest


@pytest.mark.long
@pytest.mark.slow
def test_every_kernel_is_timed_in_the_model_and_matched_with_its_record(tmp_path, mlp_onnx, load_bench):
    import autosched
    from autosched.config import TuneConfig
    from autosched.db import open_database

    autosched.tune_model(str(mlp_onnx), "llvm", str(tmp_path / "mlp.db"), TuneConfig(n_trials=2, n_threads=1))
    bench = load_bench("inmodel")
    result = bench.profile("mlp", tmp_path, threads=1, runs=2, repeat=1)
    names = {row.name for row in open_database(str(tmp_path / "mlp.db"), create=False).tasks()}
    kernels = {r["kernel"].removesuffix(bench.PREPACKED): r for r in result["rows"]}
    assert names <= set(kernels)  # every tuned task is a kernel the model calls
    assert result["n_matched"] == len(names) and all(kernels[n]["alone_s"] > 0 for n in names)
    assert all(r["calls"] >= 1 and r["in_model_s"] > 0 for r in result["rows"])
    assert result["kernels_in_model_s"] == pytest.approx(sum(r["in_model_s"] for r in result["rows"]))
