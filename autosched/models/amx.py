"""bf16 matmuls and convolutions against constant weights run on AMX tiles, where the target has them (a graph
rewrite).

After the bf16 rewrite (``autosched.models.precision``), ``matmul(x, W)`` with a bf16 activation ``x[..., K]``
and a constant bf16 weight ``W[K, N]`` (K and N multiples of 32) becomes a call of the hand-written AMX kernel
(``autosched.spaces.x86_amx``): ``x`` flattened to rows, ``W`` packed at compile time. A channels-last
convolution (NHWC, OHWI weights, no groups or dilation) becomes the same kernel on its patches: the padded input
sliced once per kernel tap and concatenated along channels (im2col), by the weight as [kh * kw * c, o]. The bias,
activation and residual that follow stay the tuned elementwise kernels they were. A target without AMX bf16, or
a process Linux refuses AMX, keeps the tuned bf16 matmuls.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from autosched._tvm import IRModule, PrimFunc, Target, mutate_graph_functions, relax, tvm
from autosched.spaces.x86_amx import amx_bf16_matmul, fits, has_amx_bf16, pack_weight

HAND_KERNEL_ATTR = "autosched.hand_kernel"  # a PrimFunc no search schedules: not a tuning task


def _static_shape(expr: Any) -> list[int] | None:
    shape = getattr(expr.ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None or not all(isinstance(v, tvm.tirx.IntImm) for v in values):
        return None
    return [int(v) for v in values]


def _dtype(expr: Any) -> str:
    return str(getattr(expr.ty, "dtype", ""))


def _bf16_weight(expr: Any, bound: Any) -> np.ndarray | None:
    """A constant weight in bf16: a bf16 constant, or a float constant cast to bf16 (``bound``: a variable's
    value, or None)."""
    while isinstance(expr, relax.Var) and bound(expr) is not None:
        expr = bound(expr)
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.astype" \
            and str(expr.attrs.dtype) == "bfloat16":
        expr = expr.args[0]
    if not isinstance(expr, tvm.ir.GenericConst):
        return None
    return expr.value.numpy().astype(ml_dtypes.bfloat16)


@relax.expr_functor.mutator
class _AmxMatmuls(relax.PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.kernels: dict[tuple[int, int, int], Any] = {}
        self.n_rewritten = 0

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in ("relax.matmul", "relax.nn.conv2d")
                and str(call.attrs.out_dtype) == "float32" and _dtype(call.args[0]) == "bfloat16"):
            return call
        weight, shape = _bf16_weight(call.args[1], self.lookup_binding), _static_shape(call.args[0])
        if weight is None or shape is None:
            return call
        out = self._matmul(call.args[0], shape, weight) if call.op.name == "relax.matmul" else \
            self._conv2d(call, shape, weight)
        if out is None:
            return call
        self.n_rewritten += 1
        return out

    def _matmul(self, x: Any, shape: list[int], weight: np.ndarray) -> Any | None:
        if weight.ndim != 2 or len(shape) < 2 or shape[-1] != weight.shape[0]:
            return None
        rows = self._on_amx(relax.op.reshape(x, [math.prod(shape[:-1]), shape[-1]]), weight)
        return None if rows is None else relax.op.reshape(rows, [*shape[:-1], weight.shape[1]])

    def _conv2d(self, call: Any, shape: list[int], weight: np.ndarray) -> Any | None:
        """A channels-last convolution as a matmul of its patches (im2col: one [pixels, kh * kw * c] matrix,
        built by slicing the padded input once per kernel tap) by the weight as [kh * kw * c, o]."""
        attrs = call.attrs
        if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NHWC", "OHWI", "NHWC") \
                or int(attrs.groups) != 1 or any(int(d) != 1 for d in attrs.dilation) or len(shape) != 4:
            return None
        (n, h, w, c), (o, kh, kw, _) = shape, weight.shape
        (sh, sw), (top, left, bottom, right) = [int(v) for v in attrs.strides], [int(v) for v in attrs.padding]
        oh, ow = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
        x = call.args[0]
        if top or left or bottom or right:
            x = relax.op.nn.pad(x, [0, 0, top, bottom, left, right, 0, 0])
        taps = [relax.op.strided_slice(x, axes=[1, 2], begin=[i, j], end=[i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1],
                                       strides=[sh, sw]) for i in range(kh) for j in range(kw)]
        if kh == kw == 1 and (oh, ow) == (h + top + bottom, w + left + right):
            taps = [x]
        patches = taps[0] if len(taps) == 1 else relax.op.concat(taps, axis=3)
        matrix = weight.reshape(o, kh * kw * c).T  # rows in (kh, kw, c) order, as the patches' columns
        rows = self._on_amx(relax.op.reshape(patches, [n * oh * ow, kh * kw * c]), matrix)
        return None if rows is None else relax.op.reshape(rows, [n, oh, ow, o])

    def _on_amx(self, rows: Any, weight: np.ndarray) -> Any | None:
        """rows[m, k] . weight[k, n] by the AMX kernel (float32), or None if the extents do not fit it."""
        (k, n), m = weight.shape, int(self.builder_.normalize(rows).ty.shape.values[0])
        if not fits(n, k) or m == 0:
            return None
        if (m, n, k) not in self.kernels:
            kernel = amx_bf16_matmul(m, n, k).without_attr("global_symbol").with_attr(HAND_KERNEL_ATTR, True)
            self.kernels[m, n, k] = self.builder_.add_func(kernel, f"amx_bf16_matmul_{m}x{n}x{k}")
        return relax.call_tir(self.kernels[m, n, k], [rows, relax.const(tvm.runtime.tensor(
            pack_weight(np.ascontiguousarray(weight))))], relax.TensorType((m, n), "float32"))


@tvm.transform.module_pass(opt_level=0, name="AmxBf16Matmuls")
def amx_bf16_matmuls(mod: IRModule, ctx: Any) -> IRModule:
    target = Target.current()
    if target is None or not has_amx_bf16(target):
        return mod
    rewriter = _AmxMatmuls(mod)
    return mutate_graph_functions(mod, rewriter, lambda: rewriter.n_rewritten > 0)


def is_hand_kernel(func: Any) -> bool:
    return bool(func.attrs and HAND_KERNEL_ATTR in func.attrs)


@tvm.transform.module_pass(opt_level=0, name="HandKernelsKeepTheirWeightLayout")
def keep_hand_kernel_layouts(mod: IRModule, ctx: Any) -> IRModule:
    """Hand kernels without the layout-free mark ``AttachAttrLayoutFreeBuffers`` gives every function of constant
    arguments: their weights are packed already, and the pass that splits weight-layout rewrites out of tuned
    kernels fails on a function with no compute block."""
    marked = [(gv, f) for gv, f in mod.functions_items() if isinstance(f, PrimFunc) and is_hand_kernel(f)
              and "layout_free_buffers" in f.attrs]
    if not marked:
        return mod
    mod = mod.shallow_copy() if hasattr(mod, "shallow_copy") else IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv, func in marked:
        mod[gv] = func.without_attr("layout_free_buffers")
    return mod
