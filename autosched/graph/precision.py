"""Mixed precision as a graph rewrite: matmuls and convolutions read bfloat16 (or float16) operands and
accumulate in float32; everything else stays float32.

The policy, per operator (``LOW_PRECISION_OPS``):
- ``matmul``, ``conv1d``, ``conv2d``, ``conv3d`` with float32 operands: both operands are cast to the low
  precision (weights once, at compile time: constant folding), the product is accumulated and returned in
  float32 (``out_dtype``), so the cast halves the bytes read and the sum keeps float32's range;
- kept in float32: every other operator (softmax, layer and batch norm, every reduction, activations,
  residual adds), and the matmuls and convolutions whose result reaches a model output through no other matmul
  or convolution and no residual join (the final logits, a classifier head): their errors would be the output's.
  A product that is added to a residual stream (a transformer's attention and feed-forward outputs, a ResNet
  block's last convolution) is only part of what reaches the output, and is converted.

The precision is recorded on the Relax module (``autosched.precision``), so tuning and compiling a model run
the same rewrite and find the same tasks; a task's PrimFunc has the low-precision dtypes in it, so its key
differs from the float32 task's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched._tvm import IRModule, mutate_graph_functions, relax, tvm
from autosched.errors import UserInputError

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}  # int8: quantize.py
ATTR = "autosched.precision"
LOW_PRECISION_OPS = ("relax.matmul", "relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d")


def with_precision(mod: IRModule, precision: str) -> IRModule:
    """``mod`` marked for the ``precision`` rewrite (``fp32``: unmarked)."""
    if precision not in PRECISIONS:
        raise UserInputError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return mod.without_attr(ATTR) if mod.attrs and ATTR in mod.attrs else mod
    return mod.with_attr(ATTR, precision)


def precision_of(mod: IRModule) -> str:
    return str(mod.attrs[ATTR]) if mod.attrs and ATTR in mod.attrs else "fp32"


def final_products(func: relax.Function) -> set[Any]:
    """The matmul and convolution calls whose result reaches the function's output without passing through
    another matmul or convolution, or through a residual join (an add of two computed tensors)."""
    bound: dict[Any, Any] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding):
                bound[binding.var] = binding.value
    found: set[Any] = set()
    seen: set[Any] = set()
    stack = _vars_in(func.body.body)
    while stack:
        var = stack.pop()
        if var in seen or var not in bound:
            continue
        seen.add(var)
        value = bound[var]
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in LOW_PRECISION_OPS:
            found.add(value)
        elif not _residual_join(value, bound):
            stack.extend(_vars_in(value))
    return found


def _residual_join(value: Any, bound: dict[Any, Any]) -> bool:
    """An add whose two operands are both computed from the input (a residual connection)."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.add"):
        return False
    return all(_computed(arg, bound) for arg in value.args)


def _computed(expr: Any, bound: dict[Any, Any]) -> bool:
    while isinstance(expr, relax.Var) and expr in bound:
        expr = bound[expr]
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name in (
            "relax.astype", "relax.reshape", "relax.permute_dims", "relax.broadcast_to"):
        return _computed(expr.args[0], bound)
    return not isinstance(expr, tvm.ir.GenericConst)


def _vars_in(expr: Any) -> list[Any]:
    found: list[Any] = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, relax.Var) else None)
    return found


def _float32(expr: Any) -> bool:
    return str(getattr(expr.ty, "dtype", "")) == "float32"


@relax.expr_functor.mutator
class _LowPrecision(relax.PyExprMutator):
    def __init__(self, mod: IRModule, dtype: str) -> None:
        super().__init__(mod)
        self.dtype = dtype
        self.keep: set[Any] = set()
        self.n_converted = 0

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in LOW_PRECISION_OPS) or op in self.keep:
            return call
        if not all(_float32(a) for a in call.args[:2]):
            return call
        a, b = (relax.op.astype(x, self.dtype) for x in call.args[:2])
        self.n_converted += 1
        return remake_product(call, a, b, "float32")


def remake_product(call: Any, a: Any, b: Any, out_dtype: str) -> Any:
    """The matmul or convolution ``call`` (one of ``LOW_PRECISION_OPS``) of other operands, returning
    ``out_dtype``: every other attribute (strides, padding, layouts) kept."""
    if call.op.name == "relax.matmul":
        return relax.op.matmul(a, b, out_dtype=out_dtype)
    attrs = call.attrs
    make = getattr(relax.op.nn, call.op.name.removeprefix("relax.nn."))
    return make(a, b, strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation, groups=attrs.groups,
                data_layout=attrs.data_layout, kernel_layout=attrs.kernel_layout, out_layout=attrs.out_layout,
                out_dtype=out_dtype)


def rescaled(call: Any, product: Any, scale: np.ndarray) -> Any:
    """The int32 ``product`` (``call`` remade) as float32, times ``scale`` (one value per output channel)
    along the result's channel axis."""
    out_axis = output_channel_axes(call)[1]
    scale = scale.astype(np.float32).reshape([-1] + [1] * (len(call.ty.shape.values) - 1 - out_axis))
    return relax.op.multiply(relax.op.astype(product, "float32"), relax.const(scale))


def output_channel_axes(call: Any) -> tuple[int, int]:
    """(the weight's output-channel axis, the result's channel axis) of a matmul [.., K] x [K, N] or a
    convolution in any layout."""
    if call.op.name == "relax.matmul":
        return 1, len(call.ty.shape.values) - 1
    return str(call.attrs.kernel_layout).index("O"), str(call.attrs.out_layout).index("C")


def mixed_precision_pass(precision: str) -> tvm.transform.Pass:
    """The rewrite of the module doc for ``precision`` (``bf16`` or ``fp16``)."""
    dtype = PRECISIONS[precision]

    @tvm.transform.module_pass(opt_level=0, name=f"MixedPrecision_{precision}")
    def rewrite(mod: IRModule, ctx: Any) -> IRModule:
        converter = _LowPrecision(mod, dtype)
        for _, func in mod.functions_items():
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
                converter.keep |= final_products(func)
        return mutate_graph_functions(mod, converter, lambda: converter.n_converted > 0)

    return rewrite
