"""Matmul extents that no tile divides (197 tokens, a 50257-word vocabulary) are padded; the values are the same."""

from __future__ import annotations

import numpy as np
import pytest

from autosched._tvm import relax, tvm
from autosched.graph.padding import pad_awkward_matmuls, padded_columns, padded_rows
from autosched.graph.passes import GRAPH_PASSES


@pytest.mark.parametrize("m,want", [(197, 200), (196, 196), (128, 128), (50, 50), (31, 31), (37, 40), (1, 1)])
def test_rows_are_padded_only_where_no_register_block_divides_them(m, want):
    assert padded_rows(m) == want


@pytest.mark.parametrize("n,want", [(50257, 50304), (1000, 1000), (10, 10), (131, 136), (3072, 3072), (63, 63)])
def test_columns_are_padded_to_whole_vectors(n, want):
    assert padded_columns(n) == want


def _ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]


def _ffn(x_shape, k, n, residual: bool, rng):
    """x @ W + b -> GELU (erf form) [-> + x]: a transformer's linear layer with its epilogue."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.const(rng.standard_normal((k, n)).astype("float32"))
    b = relax.const(rng.standard_normal((n,)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, w), b))
            gelu = bb.emit(relax.op.multiply(relax.op.multiply(y, relax.op.add(relax.op.erf(y), relax.const(1.0))),
                                             relax.const(0.5)))
            out = bb.emit_output(relax.op.add(gelu, x) if residual else gelu)
        bb.emit_func_output(out)
    return relax.transform.Normalize()(bb.get())


def _run(mod, x):
    vm = relax.VirtualMachine(relax.build(mod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("x_shape,k,n", [
    ((1, 197, 64), 64, 96),   # ViT's tokens: M padded to 200
    ((197, 1, 64), 64, 96),   # sequence-first (nn.MultiheadAttention): the same M in the leading axis
    ((1, 64, 32), 32, 131),   # a vocabulary-like N padded to 136 (the weight and the bias padded with zeros)
])
def test_padded_matmul_computes_the_same_values_and_keeps_its_epilogue(x_shape, k, n):
    rng = np.random.default_rng(0)
    mod = _ffn(x_shape, k, n, residual=False, rng=rng)
    padded = pad_awkward_matmuls(mod)
    ops = _ops(padded)
    assert ops[-1] == "relax.strided_slice" and ops.count("relax.strided_slice") == 1, ops  # below the epilogue
    matmul = [b.value for b in padded["main"].body.blocks[0].bindings if "matmul" in str(b.value.op)][0]
    assert tuple(int(d) for d in matmul.ty.shape.values) != tuple(x_shape[:-1]) + (n,)
    x = rng.standard_normal(x_shape).astype("float32")
    np.testing.assert_array_equal(_run(padded, x), _run(mod, x))


def test_an_operand_of_the_original_extent_takes_the_slice_before_it():
    """The residual ``+ x`` reads x at 197 rows: the slice goes before that add, after the rest."""
    rng = np.random.default_rng(1)
    mod = _ffn((1, 197, 64), 64, 64, residual=True, rng=rng)
    padded = pad_awkward_matmuls(mod)
    ops = _ops(padded)
    assert ops[-2:] == ["relax.strided_slice", "relax.add"] and "relax.erf" in ops[:-2], ops
    x = rng.standard_normal((1, 197, 64)).astype("float32")
    np.testing.assert_array_equal(_run(padded, x), _run(mod, x))


@pytest.mark.parametrize("x_shape,w_shape,constant", [
    ((1, 196, 64), (64, 96), True),    # 196 rows: blocks of 4, 7, 14 divide them
    ((1, 197, 64), (64, 96), False),   # a weight that is not a constant (attention's batch matmuls)
    ((4, 197, 64), (64, 96), True),    # two leading axes longer than 1: which one is M is not clear
])
def test_left_alone(x_shape, w_shape, constant):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    params = [x]
    if constant:
        w = relax.const(np.ones(w_shape, "float32"))
    else:
        w = relax.Var("w", relax.TensorType(w_shape, "float32"))
        params.append(w)
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(out)
    mod = relax.transform.Normalize()(bb.get())
    assert pad_awkward_matmuls(mod).same_as(mod)


def test_the_padding_is_one_of_the_graph_passes_and_optional():
    (found,) = [p for p in GRAPH_PASSES if "pad matmul" in p.name]
    assert found.optional


def test_two_padded_matmuls_in_a_row_pass_the_padded_rows_on():
    """fc1 -> GELU -> fc2 (ViT's MLP): one pad before fc1, one slice after fc2, none between."""
    rng = np.random.default_rng(2)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 197, 32), "float32"))
    w1, w2 = (relax.const(rng.standard_normal(s).astype("float32")) for s in [(32, 64), (64, 32)])
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.tanh(relax.op.matmul(x, w1)))
            out = bb.emit_output(relax.op.add(relax.op.matmul(h, w2), x))
        bb.emit_func_output(out)
    mod = relax.transform.Normalize()(bb.get())
    padded = pad_awkward_matmuls(mod)
    ops = _ops(padded)
    assert ops == ["relax.nn.pad", "relax.matmul", "relax.tanh", "relax.matmul", "relax.strided_slice",
                   "relax.add"], ops
    xs = rng.standard_normal((1, 197, 32)).astype("float32")
    np.testing.assert_array_equal(_run(padded, xs), _run(mod, xs))
