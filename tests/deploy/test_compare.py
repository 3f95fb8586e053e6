"""autosched.compare: every contender checked against the reference before it is timed, in interleaved rounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx_graphs import mlp

import autosched
from autosched.deploy.compare import ONNXRUNTIME, OPENVINO, PYTORCH, as_arrays, compare, peer_calls
from autosched.errors import UserInputError

X = np.random.default_rng(0).standard_normal((4, 16)).astype("float32")


def test_contenders_are_checked_then_timed_and_a_wrong_or_failing_one_is_reported_not_timed():
    calls = {"numpy": lambda: [X * 2.0], "torch": lambda: (torch.from_numpy(X) * 2.0,),
             "wrong": lambda: [X * 2.0 + 1.0], "broken": lambda: 1 / 0}
    result = autosched.compare(calls, "numpy", repeat=3, min_round_s=0.0, refuse_above={"wrong": 1e-6})
    assert set(result.rounds_s) == {"numpy", "torch"} and all(len(v) == 3 for v in result.rounds_s.values())
    assert result.errors["torch"] < 1e-7 and result.errors["wrong"] > 0.1
    assert result.untimed["wrong"].startswith("outputs differ from numpy's: max relative error")
    assert result.untimed["broken"].startswith("ZeroDivisionError")
    assert result.ratio("torch", "numpy") > 0 and result.paired_ratio("torch", "numpy") > 0
    assert np.isnan(result.ratio("wrong", "numpy"))


def test_an_error_above_no_limit_is_timed_and_reported_and_the_reference_may_be_arrays():
    result = compare({"off": lambda: [X + 0.5]}, [X], repeat=1, min_round_s=0.0)
    assert "off" in result.rounds_s and result.errors["off"] == pytest.approx(0.5 / max(np.abs(X).max(), 1.0))
    assert result.reference == "the reference outputs"
    with pytest.raises(UserInputError, match="the reference 'ort' is not a contender"):
        compare({"off": lambda: [X]}, "ort")


def test_outputs_of_every_kind_become_a_flat_list_of_arrays():
    nested = {"logits": torch.ones(2), "past": ((torch.zeros(1), np.full(3, 2.0)),)}
    assert [a.tolist() for a in as_arrays(nested)] == [[1.0, 1.0], [0.0], [2.0, 2.0, 2.0]]
    assert as_arrays(torch.ones(2, requires_grad=True) * 2)[0].tolist() == [2.0, 2.0]


def test_peers_run_the_onnx_file_and_the_module_and_say_why_one_is_missing():
    onnx_bytes = mlp(batch=4).SerializeToString()
    peers = peer_calls([X], 1, onnx_bytes, names=(ONNXRUNTIME, OPENVINO, PYTORCH))
    assert ONNXRUNTIME in peers.calls and peers.missing[PYTORCH] == "no PyTorch module"
    try:
        import openvino  # noqa: F401
    except ImportError:
        assert "OpenVINO" in peers.missing[OPENVINO]
    else:
        assert OPENVINO in peers.calls
    result = compare(peers.calls, ONNXRUNTIME, repeat=1, min_round_s=0.0)
    assert result.errors.get(OPENVINO, 0.0) < 1e-5 and set(result.rounds_s) == set(peers.calls)
    linear = torch.nn.Linear(16, 3)
    eager = peer_calls([X], 1, torch_module=linear, torch_inputs=[torch.from_numpy(X)], names=(PYTORCH,))
    assert eager.calls[PYTORCH]().requires_grad is False  # under no_grad, as inference
    with pytest.raises(UserInputError, match="unknown peer 'tensorrt'"):
        peer_calls([X], 1, onnx_bytes, names=("tensorrt",))
