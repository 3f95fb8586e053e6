"""Models that come quantized (ONNX QDQ, made here by ONNX Runtime's own quantizer): as written, they run
exactly what the model says; with --precision int8 their matmuls and convolutions compute in integers with the
model's scales."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx_graphs import mlp
from test_precision import two_convs

from autosched._tvm import arg_specs
from autosched.cli import main
from autosched.codegen.x86_lowp import has_lowp_dense
from autosched.deploy.build import compile_unscheduled
from autosched.deploy.reference import max_relative_error
from autosched.graph.frontends import load_model
from autosched.graph.passes import fusion_groups, rewrite
from autosched.graph.precision import with_precision
from autosched.graph.qdq import integer_qdq_products
from autosched.tasks import make_target

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")


def _quantized(tmp_path, name, model, weight_type="QInt8") -> str:
    """``model`` through ONNX Runtime's static quantizer (QDQ format, per-channel int8 weights, uint8
    activations calibrated on 8 random inputs)."""
    source, out = tmp_path / f"{name}.onnx", tmp_path / f"{name}_qdq.onnx"
    onnx.save(model, source)
    spec = model.graph.input[0]
    shape = [d.dim_value for d in spec.type.tensor_type.shape.dim]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{spec.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    quantization.quantize_static(str(source), str(out), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 per_channel=True, weight_type=getattr(quantization.QuantType, weight_type),
                                 activation_type=quantization.QuantType.QUInt8)
    return str(out)


def _literal_outputs(path: str, inputs: list[np.ndarray]) -> np.ndarray:
    """What the QDQ model says, from ONNX Runtime without graph optimizations (no fused integer kernels)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: inputs[0]})[0]


def _output_step(path: str) -> float:
    """The output's quantization step (the scale of the last QuantizeLinear)."""
    graph = onnx.load(path).graph
    last = [n for n in graph.node if n.op_type == "QuantizeLinear"][-1]
    scale = next(i for i in graph.initializer if i.name == last.input[1])
    return float(onnx.numpy_helper.to_array(scale))


SKYLAKE = make_target('{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}')  # no VNNI: products stay tasks
ZEN4 = make_target('{"kind": "llvm", "mcpu": "znver4", "num-cores": 1}')  # VNNI: products become its kernel


def _products(model, target=SKYLAKE) -> list:
    return [g for g in fusion_groups(rewrite(model.mod, target)) if "matmul" in g.name or "conv" in g.name]


def _int8(path: str):
    model = load_model(path)
    model.mod = with_precision(model.mod, "int8")
    return model


@pytest.mark.parametrize("name, source", [("mlp", mlp(batch=4)), ("convs", two_convs())])
def test_as_written_a_quantized_model_runs_exactly_what_it_says(tmp_path, name, source):
    path = _quantized(tmp_path, name, source)
    model = load_model(path)
    compiled = compile_unscheduled(model, make_target("llvm", 1))
    for seed in range(2):
        inputs = model.random_inputs(seed)
        assert np.array_equal(compiled(*inputs)[0], _literal_outputs(path, inputs))


@pytest.mark.parametrize("name, source", [("mlp", mlp(batch=4)), ("convs", two_convs())])
def test_int8_computes_quantized_products_in_integers_and_matches_the_model(tmp_path, name, source):
    path = _quantized(tmp_path, name, source)
    model = _int8(path)
    products = _products(model)
    assert len(products) == 2
    for group in products:  # uint8 activations by int8 weights, summed in int32
        assert {"uint8", "int8"} <= {dtype for _, dtype in arg_specs(group.func)}, group.name
        assert "int32" in group.func.script(), group.name
    compiled = compile_unscheduled(model, make_target("llvm", 1))
    assert not any("int8" in {d for _, d in arg_specs(g.func)} for g in _products(load_model(path)))  # as written
    step = _output_step(path)
    for seed in range(3):
        inputs = model.random_inputs(seed)
        # float rounding may move a value across a rounding boundary of the output's quantization: one step
        assert np.abs(compiled(*inputs)[0] - _literal_outputs(path, inputs)).max() <= step * 1.001


def test_with_vnni_the_quantized_products_run_its_kernel_on_the_models_own_uint8_activations(tmp_path):
    path = _quantized(tmp_path, "mlp", mlp(batch=4, d_in=32, hidden=64))  # the first product fits (K 32, N 64)
    model = _int8(path)
    fused = rewrite(model.mod, ZEN4)
    kernels = [f for gv, f in fused.functions_items() if gv.name_hint.startswith("avx512_int8_matmul")]
    assert [arg_specs(f)[0] for f in kernels] == [((4, 32), "uint8")]
    assert len(_products(model, ZEN4)) == 1  # the second: 8 outputs
    if not has_lowp_dense(make_target("llvm", 1), "int8"):
        pytest.skip("this CPU has no AVX512-VNNI to run the kernel")
    compiled = compile_unscheduled(model, make_target("llvm", 1))
    step = _output_step(path)
    for seed in range(3):
        inputs = model.random_inputs(seed)
        assert np.abs(compiled(*inputs)[0] - _literal_outputs(path, inputs)).max() <= step * 1.001


def test_a_weight_with_a_zero_point_is_left_to_int8_calibration_and_is_still_close(tmp_path):
    path = _quantized(tmp_path, "mlp", mlp(batch=4), weight_type="QUInt8")
    weight_zero_points = [i for i in onnx.load(path).graph.initializer if i.name.startswith("W") and "zero" in i.name]
    assert all(np.all(onnx.numpy_helper.to_array(z) != 0) for z in weight_zero_points)
    model = load_model(path)
    assert integer_qdq_products(model.mod).same_as(model.mod)  # nothing taken from the model's scales
    model = _int8(path)  # the hidden matmul quantized by int8's own calibration, the last one left float32
    assert [("int8" in {d for _, d in arg_specs(g.func)}) for g in _products(model)] == [True, False]
    compiled = compile_unscheduled(model, make_target("llvm", 1))
    inputs = model.random_inputs(0)
    assert max_relative_error(compiled(*inputs), [_literal_outputs(path, inputs)]) < 5e-2


@pytest.mark.parametrize("precision", [pytest.param("fp32", marks=pytest.mark.long), "int8"])  # fp32: CI's long step
def test_run_checks_a_quantized_model_against_what_it_says(tmp_path, capsys, precision):
    """ONNX Runtime's default session fuses QDQ into integer kernels that saturate on CPUs without VNNI;
    ``autosched run`` checks against the model's own arithmetic and passes, as written and in int8."""
    path = _quantized(tmp_path, "convs", two_convs())
    flags = ["--threads", "1", "--db", str(tmp_path / "q.db"), "--precision", precision]
    assert main(["tune", path, *flags, "--trials", "2", "--quiet"]) == 0
    assert main(["run", path, *flags, "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "outputs match ONNX Runtime" in out
    assert precision != "fp32" or "max rel. error 0.00e+00" in out  # as written: bit for bit
