"""bench/cuda_models.py: corpus models compiled for a GPU architecture without tuning, on a machine without a GPU."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch")


@pytest.mark.long
@pytest.mark.slow
def test_corpus_models_compile_for_sm_90_with_every_group_scheduled(load_bench, tmp_path, capsys):
    argv = ["--size", "small", "--models", "squeezenet1_0,gru", "--out", str(tmp_path / "cm")]
    nvcc = shutil.which("nvcc") is not None
    assert load_bench("cuda_models").main(argv + ([] if nvcc else ["--no-nvcc"])) == 0
    rows = {r["model"]: r for r in json.loads((tmp_path / "cm.json").read_text())["rows"]}
    assert rows["gru"]["path"] == "torch" and rows["squeezenet1_0"]["path"] == "onnx"  # TVM's ONNX import lacks GRU
    for r in rows.values():
        assert r["build_ok"] and r["error"] is None and r["arch"] == "sm_90", r
        assert r["groups"] == sum(r["sources"].values()) > 0 and set(r["sources"]) <= {"dlight", "default"}, r
        assert r["kernels"] >= r["groups"]
        assert r["nvcc_ok"] is (True if nvcc else None)
    assert "2 of 2 builds compiled" in capsys.readouterr().out
