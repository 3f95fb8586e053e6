"""The peers in autosched.deploy.reference: OpenVINO's call (a benchmark peer, optional) against ONNX Runtime's."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx_graphs import conv_bn_relu, mlp

from autosched.deploy.reference import max_relative_error, onnxruntime_session, openvino_session
from autosched.errors import UserInputError
from autosched.graph.frontends import InputSpec, Model

OPTIONAL = "OpenVINO is optional (the bench extra): pip install 'autosched[bench]'"


def _onnxruntime(onnx_bytes: bytes, feed: dict) -> list[np.ndarray]:
    return list(onnxruntime_session(onnx_bytes, 1).run(None, feed))


@pytest.mark.parametrize("build", [lambda: conv_bn_relu()[0], lambda: mlp()], ids=["conv_bn_relu", "mlp_dynamic"])
def test_openvino_computes_what_onnx_runtime_computes(build, tmp_path):
    pytest.importorskip("openvino", reason=OPTIONAL)
    proto = build()
    onnx_bytes = proto.SerializeToString()
    dims = [d.dim_value or 3 for d in proto.graph.input[0].type.tensor_type.shape.dim]  # a symbolic batch: 3
    feed = {"x": np.random.default_rng(0).standard_normal(dims).astype("float32")}
    want = _onnxruntime(onnx_bytes, feed)
    onnx.save(proto, str(tmp_path / "model.onnx"))
    model = Model("tiny", None, [InputSpec("x", tuple(dims), "float32")], "onnx", onnx_bytes)
    for source in (onnx_bytes, tmp_path / "model.onnx", str(tmp_path / "model.onnx"), model):
        got = openvino_session(source, 1)(feed)
        assert [g.shape for g in got] == [w.shape for w in want]
        assert max_relative_error(got, want) < 1e-5  # float32 inference: bf16 would be ~1e-2 away


def test_each_openvino_call_returns_new_arrays():
    pytest.importorskip("openvino", reason=OPTIONAL)
    run = openvino_session(mlp(batch=2).SerializeToString(), 1)
    x = np.ones((2, 16), np.float32)
    [first] = run({"x": x})
    kept = first.copy()
    run({"x": -x})  # the request's output tensor is written again: what the first call returned is not
    np.testing.assert_array_equal(first, kept)


def test_openvino_runs_at_its_defaults_but_latency_hint_threads_and_float32(monkeypatch):
    ov = pytest.importorskip("openvino", reason=OPTIONAL)
    import openvino.properties as props
    import openvino.properties.hint as hints

    configs = []
    compile_model = ov.Core.compile_model

    def spy(self, model, device, config):
        configs.append((device, config))
        return compile_model(self, model, device, config)

    monkeypatch.setattr(ov.Core, "compile_model", spy)
    openvino_session(mlp(batch=2).SerializeToString(), 2)
    [(device, config)] = configs
    assert device == "CPU"
    assert config == {hints.performance_mode: hints.PerformanceMode.LATENCY, props.inference_num_threads: 2,
                      hints.inference_precision: ov.Type.f32}


def test_without_openvino_the_session_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino raises ImportError
    with pytest.raises(UserInputError, match=r"pip install 'autosched\[bench\]'"):
        openvino_session(mlp(batch=2).SerializeToString(), 1)


def test_a_model_without_onnx_is_refused_by_openvino():
    pytest.importorskip("openvino", reason=OPTIONAL)
    model = Model("relax_only", None, [InputSpec("x", (2, 16), "float32")], "relax", None)
    with pytest.raises(UserInputError, match="not an ONNX model"):
        openvino_session(model, 1)
