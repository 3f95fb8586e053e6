"""Models that come quantized (ONNX QuantizeLinear/DequantizeLinear pairs, "QDQ"), with ``--precision int8``:
their matmuls and convolutions compute in integers, with the model's own scales and zero points.

TVM's ONNX importer turns a QDQ model into float32 arithmetic on dequantized values (what the model says, and
what autosched runs without ``--precision``): a matmul or convolution of
``dequantize(x_q, s_x, z_x)`` by ``dequantize(W_q, s_w, 0)`` (a constant int8 weight, possibly transposed, as a
``Gemm`` imports). This pass rewrites each such product as the integer product of ``x_q`` (uint8 or int8) by
``W_q`` accumulated in int32, minus the zero point's share (the same product of a constant tensor filled with
``z_x``, folded at compile time; with padding, exactly what float zeros give), rescaled to float32 by
``s_x * s_w`` along the output channels. The result equals the float32 product up to float rounding; in a
deep network a value that this rounding moves across a rounding boundary of the next QuantizeLinear changes
by one step, and that step grows through the layers after it (as with ONNX Runtime's own integer kernels).

Left in float32 (as imported): products whose activation is not dequantized, whose weight has a non-zero
zero point, or whose scales vary along any axis but the weight's output channels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched._tvm import IRModule, mutate_graph_functions, relax, tvm
from autosched.graph.precision import LOW_PRECISION_OPS, output_channel_axes, remake_product, rescaled


def _call_of(expr: Any, op_name: str) -> Any | None:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == op_name:
        return expr
    return None


def _constant(expr: Any) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.GenericConst) else None


@relax.expr_functor.mutator
class _IntegerProducts(relax.PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.n_converted = 0

    def _bound(self, expr: Any) -> Any:
        """What a variable is bound to (the expression itself if it is not a bound variable)."""
        while isinstance(expr, relax.Var):
            value = self.lookup_binding(expr)
            if value is None:
                return expr
            expr = value
        return expr

    def _activation(self, expr: Any) -> tuple[Any, float, int] | None:
        """(x_q, s_x, z_x) of a per-tensor dequantized activation."""
        dq = _call_of(self._bound(expr), "relax.dequantize")
        if dq is None or _constant(dq.args[0]) is not None:
            return None
        scale, zero = _constant(dq.args[1]), _constant(dq.args[2])
        if scale is None or zero is None or scale.size != 1 or zero.size != 1:
            return None
        return dq.args[0], float(scale.reshape(())), int(zero.reshape(()))

    def _weight(self, expr: Any) -> tuple[np.ndarray, np.ndarray, int | None] | None:
        """(W_q, s_w, the axis s_w runs along or None for one scale) of a dequantized constant int8 weight,
        through one transpose."""
        expr = self._bound(expr)
        axes = None
        if (permute := _call_of(expr, "relax.permute_dims")) is not None:
            axes = [int(a) for a in permute.attrs.axes] if permute.attrs.axes is not None else None
            expr = self._bound(permute.args[0])
            if axes is None:
                axes = list(range(len(expr.ty.shape.values)))[::-1]
        dq = _call_of(expr, "relax.dequantize")
        if dq is None:
            return None
        w_q, scale, zero = (_constant(a) for a in dq.args[:3])
        if w_q is None or scale is None or zero is None or w_q.dtype != np.int8 or np.any(zero != 0):
            return None
        axis = None if scale.size == 1 else int(dq.attrs.axis) % w_q.ndim
        if axes is not None:
            w_q = w_q.transpose(axes)
            axis = None if axis is None else axes.index(axis)
        return w_q, scale.reshape(-1), axis

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in LOW_PRECISION_OPS):
            return call
        activation, weight = self._activation(call.args[0]), self._weight(call.args[1])
        if activation is None or weight is None:
            return call
        x_q, scale_x, zero_x = activation
        w_q, scale_w, axis = weight
        w_axis = output_channel_axes(call)[0]
        if axis is not None and axis != w_axis:
            return call
        product = remake_product(call, x_q, relax.const(w_q), "int32")
        if zero_x:
            product = relax.op.subtract(product, self._zero_point_share(call, x_q, w_q, zero_x))
        self.n_converted += 1
        return rescaled(call, product, scale_x * scale_w)

    @staticmethod
    def _zero_point_share(call: Any, x_q: Any, w_q: np.ndarray, zero_x: int) -> Any:
        """The product of a constant activation filled with ``z_x`` (batch 1, broadcast over the batch):
        constant folding turns it into an int32 tensor."""
        shape = [int(d) for d in x_q.ty.shape.values]
        if call.op.name == "relax.matmul":
            shape = [1] * (len(shape) - 1) + shape[-1:]
        else:
            shape[str(call.attrs.data_layout).index("N")] = 1
        filled = np.full(shape, zero_x, dtype=str(x_q.ty.dtype))
        return remake_product(call, relax.const(filled), relax.const(w_q), "int32")


@tvm.transform.module_pass(opt_level=0, name="IntegerQDQProducts")
def integer_qdq_products(mod: IRModule, ctx: Any) -> IRModule:
    """The rewrite of the module doc."""
    rewriter = _IntegerProducts(mod)
    return mutate_graph_functions(mod, rewriter, lambda: rewriter.n_converted > 0)
