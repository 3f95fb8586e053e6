"""Every example runs, with a tiny budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {  # script -> (tiny-budget arguments, what its output must say)
    "single_operator/tune_matmul.py": (["--size", "32", "--trials", "4"], "matches numpy"),
    "onnx_model/tune_onnx.py": (["--model", "tiny_cnn", "--trials", "3"], "matches ONNX Runtime"),
    "pytorch_model/tune_pytorch.py": (["--model", "tiny_mlp", "--trials", "3"], "matches PyTorch"),
    "relax_module/tune_relax.py": (["--batch", "2", "--trials", "3"], "matches numpy"),
    # one per model family: a small model, one trial per task at most, a few seconds of tuning
    **{f"{family}/tune_{family}.py": (["--small", "--trials", "1", "--time", "5s"], "outputs match")
       for family in ("mlp", "resnet", "mobilenet", "bert", "gpt", "vit", "lstm")},
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs(script, tmp_path):
    extra, expected = EXAMPLES[script]
    if "pytorch" in script or "onnx" in script:
        pytest.importorskip("torch")
    args = [sys.executable, str(ROOT / "examples" / script), *extra, "--db", str(tmp_path / "ex.db")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout
    if "gpt" in script:
        assert "generated" in proc.stdout and "each PyTorch's choice" in proc.stdout


def test_every_example_is_tested():
    found = {str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.py")}
    assert found == set(EXAMPLES)
