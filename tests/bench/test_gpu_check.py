"""bench/gpu_check.py: its four steps (tune, check against PyTorch, time beside PyTorch, JSON) run here on this CPU
with small shapes; on a machine with a GPU (tests marked ``gpu``) the real script runs on short budgets."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def check_rows(path: Path, n_rows: int) -> list[dict]:
    rows = json.loads(path.read_text())["rows"]
    assert [r["case"] for r in rows][:6] == ["matmul_fp32", "matmul_fp16", "matmul_fp16_f32acc", "matmul_bf16",
                                             "conv2d", "conv2d_fp16"]
    assert len(rows) == n_rows
    for r in rows:
        assert r["error"] is None, r
        assert r["n_measured"] > 0 and r["autosched_ms"] > 0 and r["torch_ms"] > 0, r
        low_precision = r["case"] in ("matmul_fp16", "matmul_fp16_f32acc", "matmul_bf16", "conv2d_fp16")
        assert r["max_rel_err"] < (2e-2 if low_precision else 1e-3), r
        outcomes = next(n for n in r["notes"] if "OK: " in n)  # how the measurements ended, counted
        assert sum(int(c.split(": ")[1]) for c in outcomes.split(", ")) >= r["n_measured"], r
    return rows


@pytest.mark.long
@pytest.mark.slow
def test_the_script_runs_its_steps_on_this_cpu(tmp_path, capsys):
    assert load_script().main(["--target", "llvm", "--small", "--budget-s", "20", "--repeat", "3",
                               "--out", str(tmp_path / "dry")]) == 0
    check_rows(tmp_path / "dry.json", 7)
    printed = capsys.readouterr().out
    assert "fp32 matmul at" in printed and "tiny_cnn" in printed
    model = json.loads((tmp_path / "dry.json").read_text())["rows"][6]
    assert any(n.startswith("kernels ") and "whole call" in n for n in model["notes"]), model["notes"]  # profile
    assert model["graph_ms"] is None  # CUDA graphs only on a GPU
    assert model["torch_compile_ms"] > 0  # Inductor, timed beside the others


def test_the_model_share_takes_its_part_of_the_budget_and_the_kernels_split_the_rest():
    share = load_script().shares(0.5)
    assert share["model"] == 0.5 and sum(share.values()) == pytest.approx(1.0)
    assert share["matmul_fp32"] > share["matmul_fp16_f32acc"] == share["matmul_bf16"] == share["conv2d_fp16"]


def test_without_a_gpu_it_says_so_and_exits_2(capsys):
    from autosched.targets import has_device

    if has_device("cuda"):
        pytest.skip("this machine has a GPU")
    assert load_script().main([]) == 2
    assert "no CUDA GPU on this machine" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.slow
def test_the_script_on_the_gpu(tmp_path):
    assert load_script().main(["--budget-s", "120", "--repeat", "3", "--out", str(tmp_path / "gpu")]) == 0
    check_rows(tmp_path / "gpu.json", 8)  # two models: resnet18 and bert
