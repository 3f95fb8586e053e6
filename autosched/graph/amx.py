"""Matmuls and convolutions against constant weights in bf16 or int8 run on AMX tiles, where the target has them
(a graph rewrite).

After the bf16 rewrite (``autosched.graph.precision``), ``matmul(x, W)`` with a bf16 activation ``x[..., K]``
and a constant bf16 weight ``W[K, N]`` (N a multiple of 32, K of 32) becomes a call of the hand-written AMX kernel
(``autosched.codegen.x86_amx``): ``x`` flattened to rows, ``W`` packed at compile time. After the int8 rewrite
(``autosched.graph.quantize``) the same goes for int8 x int8 -> int32 products (K a multiple of 64). A
channels-last convolution (NHWC, OHWI weights, no groups or dilation) becomes the same kernel on its patches: the
padded input sliced once per kernel tap and concatenated along channels (im2col), by the weight as
[kh * kw * c, o]. The rescale, bias, activation and residual that follow stay the tuned elementwise kernels they
were. A target without AMX but with AVX512-BF16 or AVX512-VNNI (AMD Zen 4/5, Intel Ice Lake, Cooper Lake) gets the
same rewrite onto ``x86_lowp.lowp_dense`` (``vdpbf16ps`` / ``vpdpbusd``; N and K multiples of 32). ``vpdpbusd``
multiplies unsigned by signed bytes, so there the int8 activation (within +-127) goes in shifted to uint8
(x + 128) and the product comes out corrected by the constant 128 * sum_k W[k, n] per column: exact in int32;
a quantized model's own uint8 activations (QDQ, ``autosched.graph.qdq``) go in as they are.
A target with none of these, or a process Linux refuses AMX, keeps the tuned low-precision kernels.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from autosched._tvm import IRModule, Target, mutate_graph_functions, relax, tvm
from autosched.codegen.x86_amx import BF16, INT8, KINDS, AmxKind, amx_matmul, fits, has_amx, pack_weight
from autosched.codegen.x86_lowp import fits_lowp_dense, has_lowp_dense, lowp_dense, pack_lowp_weight
from autosched.graph.reshape_sinking import _shape

HAND_KERNEL_ATTR = "autosched.hand_kernel"  # a PrimFunc no search schedules: not a tuning task
VNNI_SHIFT = 128  # int8 -> uint8 for vpdpbusd


def _dtype(expr: Any) -> str:
    return str(getattr(expr.ty, "dtype", ""))


def _constant_weight(expr: Any, bound: Any, kind: AmxKind) -> np.ndarray | None:
    """A constant weight in ``kind``'s type: a constant of it, or a float constant cast to bf16 (``bound``: a
    variable's value, or None)."""
    while isinstance(expr, relax.Var) and bound(expr) is not None:
        expr = bound(expr)
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.astype" \
            and str(expr.attrs.dtype) == "bfloat16" == kind.dtype:
        expr = expr.args[0]
    if not isinstance(expr, tvm.ir.GenericConst):
        return None
    value = expr.value.numpy()
    if kind is BF16:
        return value.astype(ml_dtypes.bfloat16)
    return value if str(value.dtype) == kind.dtype else None


def _kind(call: Any) -> AmxKind | None:
    """The AMX kind of a matmul or convolution by its operand and result types, if any."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name in ("relax.matmul", "relax.nn.conv2d")):
        return None
    types = (_dtype(call.args[0]), str(call.attrs.out_dtype))
    if types == ("uint8", "int32"):  # a quantized model's own uint8 activations (``autosched.graph.qdq``)
        return INT8
    return next((kind for kind in KINDS.values() if types == (kind.dtype, kind.acc_dtype)), None)


@relax.expr_functor.mutator
class _AmxMatmuls(relax.PyExprMutator):
    def __init__(self, mod: IRModule, kinds: list[AmxKind], avx512_kinds: list[AmxKind] = ()) -> None:
        super().__init__(mod)
        self.kinds = kinds + list(avx512_kinds)
        self.avx512_kinds = list(avx512_kinds)  # by AVX-512's kernel (no AMX for them here)
        self.kernels: dict[tuple[int, int, int, str], Any] = {}
        self.n_rewritten = 0

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        kind = _kind(call)
        if kind not in self.kinds or (_dtype(call.args[0]) == "uint8" and kind not in self.avx512_kinds):
            return call  # AMX's int8 kernel is signed x signed; VNNI's takes uint8 as it is
        weight, shape = _constant_weight(call.args[1], self.lookup_binding, kind), _shape(call.args[0])
        if weight is None or shape is None:
            return call
        out = self._matmul(call.args[0], shape, weight, kind) if call.op.name == "relax.matmul" else \
            self._conv2d(call, shape, weight, kind)
        if out is None:
            return call
        self.n_rewritten += 1
        return out

    def _matmul(self, x: Any, shape: tuple[int, ...], weight: np.ndarray, kind: AmxKind) -> Any | None:
        if weight.ndim != 2 or len(shape) < 2 or shape[-1] != weight.shape[0]:
            return None
        rows = self._on_amx(relax.op.reshape(x, [math.prod(shape[:-1]), shape[-1]]), weight, kind)
        return None if rows is None else relax.op.reshape(rows, [*shape[:-1], weight.shape[1]])

    def _conv2d(self, call: Any, shape: tuple[int, ...], weight: np.ndarray, kind: AmxKind) -> Any | None:
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
        rows = self._on_amx(relax.op.reshape(patches, [n * oh * ow, kh * kw * c]), matrix, kind)
        return None if rows is None else relax.op.reshape(rows, [n, oh, ow, o])

    def _on_amx(self, rows: Any, weight: np.ndarray, kind: AmxKind) -> Any | None:
        """rows[m, k] . weight[k, n] by the AMX (or AVX-512) kernel of ``kind``, or None if the extents do not
        fit it."""
        rows = self.builder_.normalize(rows)
        (k, n), m = weight.shape, int(rows.ty.shape.values[0])
        avx512 = kind in self.avx512_kinds
        if not (fits_lowp_dense(n, k, kind.name) if avx512 else fits(n, k, kind)) or m == 0:
            return None
        key = (m, n, k, kind.name)
        if key not in self.kernels:
            kernel = lowp_dense(m, n, k, kind.name) if avx512 else amx_matmul(m, n, k, kind)
            kernel = kernel.without_attr("global_symbol").with_attr(HAND_KERNEL_ATTR, True)
            self.kernels[key] = self.builder_.add_func(
                kernel, f"{'avx512' if avx512 else 'amx'}_{kind.name}_matmul_{m}x{n}x{k}")
        weight = np.ascontiguousarray(weight)
        packed = pack_lowp_weight(weight, kind.name) if avx512 else pack_weight(weight, kind)
        vnni = avx512 and _dtype(rows) == "int8"  # signed activations: shifted to uint8, corrected after
        if vnni:
            rows = relax.op.astype(relax.op.add(relax.op.astype(rows, "int32"),
                                                relax.const(VNNI_SHIFT, "int32")), "uint8")
        out = relax.call_tir(self.kernels[key], [rows, relax.const(tvm.runtime.tensor(packed))],
                             relax.TensorType((m, n), kind.acc_dtype))
        if vnni:
            correction = (VNNI_SHIFT * weight.astype(np.int64).sum(axis=0)).astype(np.int32)
            out = relax.op.subtract(out, relax.const(correction))
        return out


@tvm.transform.module_pass(opt_level=0, name="AmxMatmuls")
def amx_matmuls(mod: IRModule, ctx: Any) -> IRModule:
    target = Target.current()
    if target is None:
        return mod
    kinds = [kind for kind in KINDS.values() if has_amx(target, kind)]
    avx512_kinds = [kind for kind in KINDS.values() if kind not in kinds and has_lowp_dense(target, kind.name)]
    if not kinds and not avx512_kinds:
        return mod
    rewriter = _AmxMatmuls(mod, kinds, avx512_kinds)
    return mutate_graph_functions(mod, rewriter, lambda: rewriter.n_rewritten > 0)


def is_hand_kernel(func: Any) -> bool:
    return bool(func.attrs and HAND_KERNEL_ATTR in func.attrs)

