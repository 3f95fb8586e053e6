"""bench/cuda_spaces.py: the share of legal settings of CUDA spaces, and their nvcc builds, on a machine without
a GPU (builds where nvcc is installed)."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.mark.slow
def test_it_measures_legal_shares_and_builds(load_bench, tmp_path, capsys):
    builds = shutil.which("nvcc") is not None
    argv = ["--archs", "sm_90", "--samples", "3", "--ops", "softmax,matmul,matmul_bf16", "--out", str(tmp_path / "cs")]
    assert load_bench("cuda_spaces").main(argv + ([] if builds else ["--no-build"])) == 0
    rows = {r["op"]: r for r in json.loads((tmp_path / "cs.json").read_text())["rows"]}
    assert set(rows) == {"softmax", "matmul", "matmul_bf16"}
    assert all(r["arch"] == "sm_90" and r["designs"] > 0 for r in rows.values())
    for r in rows.values():
        assert 0 <= r["valid_drawn"] <= r["valid_repaired"] <= 1 and r["ms_per_sample"] > 0
    assert rows["softmax"]["valid_drawn"] == 1.0  # no tiles bound to threads: every setting is legal as drawn
    assert rows["matmul"]["valid_repaired"] > rows["matmul"]["valid_drawn"]  # repair is what makes tiles legal
    assert rows["matmul_bf16"]["tensor_core_designs"] == 2 and rows["matmul_bf16"]["tensor_core_seeds"] == 4
    if builds:
        assert rows["softmax"]["default_builds"] is True, rows["softmax"]["errors"]
        assert all(r["dlight_builds"] for r in rows.values()), rows
        assert rows["matmul_bf16"]["seeds_build"] == [True] * 4, rows["matmul_bf16"]["errors"]
    assert "sm_90  softmax" in capsys.readouterr().out
