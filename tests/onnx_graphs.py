"""Small ONNX models built with onnx.helper (no PyTorch needed), each exercising one graph rewrite (the
``onnx_file`` fixture, in tests/conftest.py, writes one to a file)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)

from autosched.corpus.modules import relax_linear  # noqa: E402,F401  (shared with tests/test_programs.py)


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "test", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _f32(*shape, scale=0.1):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def conv_bn_relu(channels=8, size=12):
    """Conv -> BatchNormalization -> Relu (BN folds into the conv weights)."""
    inits = {"W": _f32(channels, 3, 3, 3), "g": RNG.random(channels, dtype=np.float32) + 0.5,
             "b": _f32(channels), "m": _f32(channels), "v": RNG.random(channels, dtype=np.float32) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"], epsilon=1e-5),
             helper.make_node("Relu", ["bn"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])], inits), inits


def mlp(batch="N", d_in=16, hidden=32, d_out=8):
    """Gemm -> Relu -> Gemm, batch dimension symbolic unless an int is given."""
    inits = {"W1": _f32(hidden, d_in), "b1": _f32(hidden), "W2": _f32(d_out, hidden), "b2": _f32(d_out)}
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], transB=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_out])], inits)


def redundant(d=16):
    """A weight computed by a constant subgraph (W = A + B), two identical MatMul+Relu branches (one after
    CSE), a dead node, and two structurally equal layers (one task of weight 2)."""
    inits = {"A": _f32(d, d), "B": _f32(d, d), "W2": _f32(d, d), "W3": _f32(d, d)}
    nodes = [helper.make_node("Add", ["A", "B"], ["W"]),
             helper.make_node("MatMul", ["x", "W"], ["m1"]), helper.make_node("Relu", ["m1"], ["r1"]),
             helper.make_node("MatMul", ["x", "W"], ["m2"]), helper.make_node("Relu", ["m2"], ["r2"]),
             helper.make_node("Add", ["r1", "r2"], ["s"]),
             helper.make_node("Sigmoid", ["x"], ["unused"]),
             helper.make_node("MatMul", ["s", "W2"], ["t"]), helper.make_node("Relu", ["t"], ["u"]),
             helper.make_node("MatMul", ["u", "W3"], ["v"]), helper.make_node("Relu", ["v"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, d])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, d])], inits), inits


def ffn_block(seq=8, d=16, hidden=32):
    """A transformer FFN as PyTorch's ONNX exporter writes it for a 3-D input: Reshape to 2-D, MatMul, bias
    Add, Reshape back, GELU (Div, Erf, Add, Mul, Mul), Reshape, MatMul, Add, Reshape back, residual Add."""
    inits = {"W1": _f32(d, hidden), "b1": _f32(hidden), "W2": _f32(hidden, d), "b2": _f32(d),
             "s2d": np.array([seq, d], np.int64), "s3d": np.array([1, seq, hidden], np.int64),
             "h2d": np.array([seq, hidden], np.int64), "o3d": np.array([1, seq, d], np.int64),
             "sqrt2": np.array(2 ** 0.5, np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Reshape", ["x", "s2d"], ["x2"]), helper.make_node("MatMul", ["x2", "W1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]), helper.make_node("Reshape", ["a1", "s3d"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["g0"]), helper.make_node("Erf", ["g0"], ["g1"]),
             helper.make_node("Add", ["g1", "one"], ["g2"]), helper.make_node("Mul", ["h", "g2"], ["g3"]),
             helper.make_node("Mul", ["g3", "half"], ["g"]), helper.make_node("Reshape", ["g", "h2d"], ["g2d"]),
             helper.make_node("MatMul", ["g2d", "W2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["a2"]),
             helper.make_node("Reshape", ["a2", "o3d"], ["o"]), helper.make_node("Add", ["o", "x"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])], inits)


def unsupported():
    nodes = [helper.make_node("Celu", ["x"], ["y"], alpha=1.0)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], {})
