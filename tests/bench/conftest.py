"""What the benchmark scripts' tests share: loading a script under bench/, and the zoo MLP as an ONNX file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def load_bench():
    """``load_bench("inmodel")``: bench/inmodel.py as a module."""

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # a script's dataclasses look their module up there
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def mlp_onnx(tmp_path) -> Path:
    """The zoo MLP exported to ONNX in ``tmp_path`` (needs PyTorch)."""
    pytest.importorskip("torch")
    import autosched

    path = tmp_path / "mlp.onnx"
    path.write_bytes(autosched.load_model("zoo:mlp").onnx_bytes)
    return path
