"""Model import: shapes from the model or --input, and one clear error for each kind of bad input."""

from __future__ import annotations

import pytest
from onnx_graphs import conv_bn_relu, mlp, relax_linear, unsupported

from autosched.errors import UserInputError
from autosched.graph.frontends import load_model, parse_input_shapes


def test_parse_input_shapes():
    assert parse_input_shapes(["x:1x3x224x224", "mask:1,128"]) == {"x": (1, 3, 224, 224), "mask": (1, 128)}
    for bad in ["x", "x:", "x:1xax2", "x:0x3"]:
        with pytest.raises(UserInputError, match="--input"):
            parse_input_shapes([bad])


def test_onnx_file_with_fixed_shapes(onnx_file):
    model = load_model(onnx_file(conv_bn_relu()[0]))
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [("x", (1, 3, 12, 12), "float32")]
    assert model.source == "onnx" and model.onnx_bytes
    assert "main" in [gv.name_hint for gv in model.mod.get_global_vars()]


def test_unknown_dim_needs_input_and_the_message_names_it(onnx_file):
    path = onnx_file(mlp())
    with pytest.raises(UserInputError, match=r"input 'x' has unknown dimensions \(NxBAD\)|input 'x' has unknown"):
        load_model(path)
    with pytest.raises(UserInputError, match="--input x:1x16"):
        load_model(path)
    model = load_model(path, {"x": (4, 16)})
    assert model.inputs[0].shape == (4, 16)


@pytest.mark.parametrize("shapes,message", [
    ({"y": (4, 16)}, "unknown input 'y' in --input: the model's inputs are x"),
    ({"x": (4, 16, 1)}, "has rank 3 but input 'x' has rank 2"),
    ({"x": (4, 15)}, "does not match the model's fixed shape Nx16"),
])
def test_bad_input_shapes(onnx_file, shapes, message):
    with pytest.raises(UserInputError, match=message):
        load_model(onnx_file(mlp()), shapes)


def test_missing_not_onnx_corrupt_and_unsupported(tmp_path, onnx_file):
    with pytest.raises(UserInputError, match="does not exist"):
        load_model(tmp_path / "nope.onnx")
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a protobuf\n" * 10)
    with pytest.raises(UserInputError, match="is not an ONNX model"):
        load_model(text)
    broken = conv_bn_relu()[0]
    broken.graph.node[1].input[0] = "no_such_tensor"
    with pytest.raises(UserInputError, match="corrupt ONNX model"):
        load_model(onnx_file(broken, "broken.onnx"))
    with pytest.raises(UserInputError, match="does not support: Celu"):
        load_model(onnx_file(unsupported(), "celu.onnx"))


def test_relax_module_and_torch_module():
    model = load_model(relax_linear())
    assert model.source == "relax" and model.entry == "forward"
    assert [(s.name, s.shape) for s in model.inputs] == [("x", (2, 16))]

    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU())
    model = load_model(module, example_inputs=(torch.randn(2, 16),))
    assert model.source == "torch" and model.inputs[0].shape == (2, 16)
    with pytest.raises(UserInputError, match="example_inputs"):
        load_model(module)
