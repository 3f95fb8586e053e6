"""Mixed precision: matmuls and convolutions in bf16/fp16 with float32 accumulation, the final ones and every
other operator in float32; task keys carry the dtype; the error against float32 is measured on compile."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper
from onnx_graphs import _f32, _model, ffn_block, mlp

from autosched._tvm import arg_specs
from autosched.api import compile as compile_api
from autosched.api import extract_model_tasks
from autosched.cli import main
from autosched.deploy.build import compile_unscheduled
from autosched.deploy.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.errors import UserInputError
from autosched.graph import passes as graph
from autosched.graph.frontends import load_model
from autosched.graph.passes import fusion_groups, rewrite
from autosched.graph.precision import precision_of, with_precision
from autosched.spaces.settings import settings_for
from autosched.tasks import make_target

pytest.importorskip("onnxruntime")


def two_convs(channels=8, size=10):
    """Conv -> Relu -> Conv -> Relu (the second conv makes the output)."""
    inits = {"W1": _f32(channels, 3, 3, 3, scale=0.3), "W2": _f32(channels, channels, 3, 3, scale=0.3)}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("Conv", ["r", "W2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])], inits)


def _dtypes(func) -> set[str]:
    return {dtype for _, dtype in arg_specs(func)}


def test_precision_is_marked_on_the_module_and_checked():
    mod = load_model(mlp(batch=4)).mod
    assert precision_of(mod) == "fp32"
    assert precision_of(with_precision(mod, "bf16")) == "bf16"
    assert precision_of(with_precision(with_precision(mod, "bf16"), "fp32")) == "fp32"
    with pytest.raises(UserInputError, match="unknown precision 'int4'"):
        with_precision(mod, "int4")


@pytest.mark.parametrize("source, n_low", [(mlp(batch=4), 1), (two_convs(), 1)])
def test_all_but_the_final_products_read_low_precision(source, n_low):
    model = load_model(source)
    model.mod = with_precision(model.mod, "bf16")
    groups = fusion_groups(rewrite(model.mod, make_target("llvm", 1)))
    products = [g for g in groups if any(k in g.name for k in ("matmul", "conv"))]
    low = [g for g in products if "bfloat16" in _dtypes(g.func)]
    assert len(products) == n_low + 1 and len(low) == n_low  # the product making the output stays float32
    assert all("float32" in _dtypes(g.func) for g in low)  # accumulated and written in float32


def test_a_product_added_to_a_residual_stream_is_converted_too():
    model = load_model(ffn_block())  # x + FFN(x): the second matmul reaches the output through the residual add
    groups = fusion_groups(rewrite(with_precision(model.mod, "bf16"), make_target("llvm", 1)))
    products = [g for g in groups if "matmul" in g.name]
    assert len(products) == 2 and all("bfloat16" in _dtypes(g.func) for g in products)


def test_gelu_feeding_a_bf16_matmul_builds_and_stays_close(onnx_file):
    """GELU's fast erf (with Lets) inlined into the cast to bf16 once failed TVM's vectorizer ("Let cannot bind
    the same var to two different values"); the extents keep these matmuls off AMX, on the tuned path."""
    compiled = compile_api(str(onnx_file(ffn_block(), "ffn.onnx")), "llvm", n_threads=1, precision="bf16")
    assert 0 < compiled.precision_error < 2e-2


def test_task_keys_carry_the_dtype():
    fp32 = {t.key for t in extract_model_tasks(load_model(mlp(batch=4)), "llvm", 1)}
    bf16 = {t.key for t in extract_model_tasks(load_model(mlp(batch=4)), "llvm", 1, precision="bf16")}
    assert fp32 != bf16 and fp32 & bf16  # the converted matmul's task is new; the final one is shared


@pytest.mark.parametrize("precision, bound", [("bf16", 2e-2), ("fp16", 1e-2)])
def test_a_low_precision_build_is_close_to_float32_and_says_how_close(onnx_file, precision, bound):
    path = onnx_file(two_convs(), "convs.onnx")
    compiled = compile_api(str(path), "llvm", n_threads=1, precision=precision)
    assert compiled.precision == precision
    assert 0 < compiled.precision_error < bound  # really converted, and within the bound
    model = load_model(str(path))
    x = model.random_inputs(7)
    want = run_onnxruntime(onnxruntime_session(model, 1), model, x)
    assert max_relative_error(compiled(*x), want) < bound


def test_cli_tunes_compiles_and_runs_in_bf16(onnx_file, tmp_path, capsys):
    path, db = onnx_file(mlp(batch=4), "mlp.onnx"), str(tmp_path / "bf16.db")
    flags = ["--precision", "bf16", "--threads", "1", "--db", db]
    assert main(["tune", str(path), *flags, "--trials", "2", "--quiet"]) == 0
    assert main(["compile", str(path), *flags, "-o", str(tmp_path / "m.so")]) == 0
    out = capsys.readouterr().out
    assert "bf16: max relative error against float32" in out
    assert "1 tuned" in out or "2 tuned" in out or "3 tuned" in out
    assert main(["run", str(path), *flags, "--repeat", "1"]) == 0
    assert "outputs match ONNX Runtime" in capsys.readouterr().out


def test_cli_refuses_precision_without_a_model(tmp_path, capsys):
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", "--precision", "bf16",
                 "--db", str(tmp_path / "x.db")]) == 2
    assert "--precision goes with a MODEL" in capsys.readouterr().err



# --- int8 ------------------------------------------------------------------------------------------------------
def test_int8_quantizes_all_but_the_final_matmul_and_keys_ignore_the_scales():
    from autosched.graph.quantize import int8_pass

    model = load_model(mlp(batch=4))
    model.mod = with_precision(model.mod, "int8")
    target = make_target("llvm", 1)
    groups = fusion_groups(rewrite(model.mod, target))
    products = [g for g in groups if "matmul" in g.name]
    assert len(products) == 2 and sum("int8" in _dtypes(g.func) for g in products) == 1
    # another calibration (other scales) gives the same tasks: scales are kernel arguments, not literals
    passes = graph.graph_passes("int8")
    at = next(i for i, p in enumerate(passes) if "int8" in p.name)
    other_seed = [*passes[:at], graph.GraphPass("int8, other calibration", lambda: int8_pass(seed=99), False),
                  *passes[at + 1:]]
    fused = graph.run_passes(model.mod, target, other_seed)
    assert {g.name for g in fusion_groups(fused)} == {g.name for g in groups}
    keys = {t.key for t in extract_model_tasks(model, "llvm", 1)}
    assert keys == {t.key for t in graph.extract_tasks(fused, target, settings_for(target).version)}


def test_int8_is_close_to_float32_and_agrees_on_the_top_class(onnx_file):
    path = onnx_file(mlp(batch=1, d_in=32, hidden=64, d_out=10), "mlp.onnx")
    compiled = compile_api(str(path), "llvm", n_threads=1, precision="int8")
    assert compiled.precision == "int8" and 0 < compiled.precision_error < 5e-2
    model = load_model(str(path))
    session = onnxruntime_session(model, 1)
    inputs = [model.random_inputs(seed) for seed in range(100)]
    agree = [int(compiled(*x)[0].argmax()) == int(run_onnxruntime(session, model, x)[0].argmax()) for x in inputs]
    assert sum(agree) >= 95


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_int8_convolutions_are_quantized_per_output_channel_in_either_layout(onnx_file, layout):
    """The first convolution computes in int8 (the second makes the output and stays float32); the result
    matches ONNX Runtime's float32 model within int8's error, whether or not the layout pass ran."""
    model = load_model(two_convs())
    model.mod = with_precision(model.mod, "int8")
    target = make_target("llvm", 1)
    passes = [p for p in graph.graph_passes("int8") if layout == "NHWC" or "NHWC" not in p.name]
    fused = graph.run_passes(model.mod, target, passes)
    convs = [g for g in fusion_groups(fused) if "conv" in g.name]
    assert len(convs) == 2 and sum("int8" in _dtypes(g.func) for g in convs) == 1
    built = compile_unscheduled(model, target, fused)
    session = onnxruntime_session(model, 1)
    for seed in range(3):
        x = model.random_inputs(seed)
        assert max_relative_error(built(*x), run_onnxruntime(session, model, x)) < 5e-2
