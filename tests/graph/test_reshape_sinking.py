"""Reshapes moved below matmuls and elementwise ops: the exporter's FFN becomes two fusion groups, each a
matmul with its whole epilogue (bias, GELU, residual), with the same outputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_graphs import ffn_block

from autosched._tvm import relax
from autosched.deploy.build import compile_model, compile_unscheduled
from autosched.deploy.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.graph.frontends import load_model
from autosched.graph.passes import GRAPH_PASSES, fusion_groups, rewrite
from autosched.graph.reshape_sinking import sink_reshapes

pytest.importorskip("onnxruntime")


def _ops(mod) -> list[str]:
    return [c.op.name for c in _calls(mod["main"].body)]


def _calls(body) -> list:
    return [b.value for block in body.blocks for b in block.bindings if isinstance(b.value, relax.Call)]


def test_the_exporters_ffn_fuses_into_two_groups_with_their_epilogues(cpu_target):
    model = load_model(ffn_block(), fold_onnx_graph=False)
    sunk = sink_reshapes(model.mod)
    assert _ops(model.mod).count("relax.reshape") == 4 and "relax.reshape" not in _ops(sunk)
    groups = [g.name for g in fusion_groups(rewrite(model.mod, cpu_target))]
    assert len(groups) == 2, groups
    (first,) = [g for g in groups if "erf" in g]
    (second,) = [g for g in groups if g != first]
    assert "matmul" in first and "multiply" in first  # bias + GELU in the first matmul's group
    assert "matmul" in second and second.count("add") == 2  # bias + residual in the second's


def test_the_rewritten_model_computes_what_onnx_runtime_does(cpu_target):
    model = load_model(ffn_block())
    inputs = model.random_inputs(0)
    want = run_onnxruntime(onnxruntime_session(model, 1), model, inputs)
    assert max_relative_error(compile_model(model, cpu_target)(*inputs), want) < 1e-5
    assert max_relative_error(compile_unscheduled(model, cpu_target)(*inputs), want) < 1e-5


def _module(shape_in, reshaped, other_shape):
    """x (shape_in) -> reshape(reshaped) -> add(other) -> relu: the add has an operand of ``other_shape``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape_in, "float32"))
    c = relax.Var("c", relax.TensorType(other_shape, "float32"))
    with bb.function("main", [x, c]):
        with bb.dataflow():
            r = bb.emit(relax.op.reshape(x, reshaped))
            y = bb.emit_output(relax.op.nn.relu(relax.op.add(r, c)))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("shape_in,reshaped,other,moves", [
    ((2, 3, 4), (6, 4), (4,), True),     # a bias along the kept last dim: the reshape moves below
    ((2, 3, 4), (6, 4), (), True),       # a scalar
    ((2, 3, 4), (6, 4), (6, 1), False),  # along the merged dim: it would not broadcast the same
    ((2, 12), (6, 4), (4,), False),      # the last dim changes: a vector along it means something else
])
def test_an_elementwise_operand_moves_below_a_reshape_only_where_it_broadcasts_the_same(shape_in, reshaped, other,
                                                                                       moves):
    mod = relax.transform.Normalize()(_module(shape_in, reshaped, other))
    sunk = sink_reshapes(mod)
    assert (_ops(sunk)[-1] == "relax.reshape") == moves, _ops(sunk)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape_in).astype("float32"), rng.standard_normal(other).astype("float32")]
    outputs = []
    for m in (mod, sunk):
        vm = relax.VirtualMachine(relax.build(m, "llvm"), __import__("tvm").cpu())
        outputs.append(vm["main"](*args).numpy())
    np.testing.assert_array_equal(*outputs)


def test_the_rewrite_is_one_of_the_graph_passes_and_optional():
    (found,) = [p for p in GRAPH_PASSES if "reshapes" in p.name]
    assert found.optional
