"""Catalog of single-operator workloads (float32), each buildable for any shape.

A workload turns a shape into a TIR PrimFunc (via TE), a numpy reference and an exact FLOP count.
Arguments follow TE's convention: inputs first, the output last.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from autosched._tvm import IRModule, te, tirx, topi
from autosched.errors import UnknownNameError, UserInputError


@dataclass(frozen=True)
class Workload:
    name: str
    dims: tuple[str, ...]  # names of the shape numbers, in command-line order
    n_required: int  # how many of dims must be given (the rest have defaults)
    build: Callable[..., list]  # (*shape) -> [te tensors: inputs..., output]
    reference: Callable[..., np.ndarray]  # (*inputs, shape=...) -> output
    flops: Callable[..., float]
    defaults: Callable[..., tuple[int, ...]] = lambda *s: s
    help: str = ""

    def normalise(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if not self.n_required <= len(shape) <= len(self.dims):
            want = ",".join(self.dims[: self.n_required])
            opt = self.dims[self.n_required :]
            extra = f" (optional: {','.join(opt)})" if opt else ""
            raise UserInputError(
                f"{self.name} takes a shape {want}{extra}, got {len(shape)} numbers; e.g. --shape {self.example}"
            )
        too_big = [d for d in shape if not isinstance(d, int) or not 0 < d <= MAX_EXTENT]
        if too_big:
            raise UserInputError(f"{self.name}: size {too_big[0]} is not a positive integer up to {MAX_EXTENT} (TVM's "
                                 f"32-bit loop extents); e.g. --shape {self.example}")
        return self.defaults(*shape)

    @property
    def example(self) -> str:
        return EXAMPLES[self.name]

    def prim_func(self, shape: tuple[int, ...]) -> IRModule:
        tensors = self.build(*self.normalise(shape))
        return IRModule({"main": te.create_prim_func(tensors)})


MAX_EXTENT = 2**31 - 1  # TVM's loop extents and shapes are 32-bit integers


def parse_shape(text: str) -> tuple[int, ...]:
    """'512,512,512' or '512x512x512' -> (512, 512, 512)."""
    parts = [p.strip() for p in re.split(r"[,x]", text.strip())]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise UserInputError(f"malformed shape {text!r}: use positive integers separated by commas, e.g. 512,512,512")
    return shape


def _ph(shape, name):
    return te.placeholder(shape, "float32", name=name)


# --- builders ---------------------------------------------------------------------------------------------------


def _matmul(m, n, k):
    a, b = _ph((m, k), "A"), _ph((k, n), "B")
    r = te.reduce_axis((0, k), name="k")
    return [a, b, te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")]


def _batch_matmul(bs, m, n, k):
    a, b = _ph((bs, m, k), "A"), _ph((bs, k, n), "B")
    r = te.reduce_axis((0, k), name="k")
    return [a, b, te.compute((bs, m, n), lambda z, i, j: te.sum(a[z, i, r] * b[z, r, j], axis=r), name="C")]


def _dense(m, n, k):
    x, w, bias = _ph((m, k), "X"), _ph((n, k), "W"), _ph((n,), "bias")
    r = te.reduce_axis((0, k), name="k")
    mm = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="dense")
    add = te.compute((m, n), lambda i, j: mm[i, j] + bias[j], name="bias_add")
    out = te.compute((m, n), lambda i, j: te.max(add[i, j], tirx.const(0, "float32")), name="relu")
    return [x, w, bias, out]


def _conv2d(n, c, h, w, k, r, s, stride, pad):
    x, wt, bias = _ph((n, c, h, w), "X"), _ph((k, c, r, s), "W"), _ph((k,), "bias")
    conv = topi.nn.conv2d_nchw(x, wt, stride, pad, 1)
    add = te.compute(conv.shape, lambda b, o, i, j: conv[b, o, i, j] + bias[o], name="bias_add")
    out = te.compute(conv.shape, lambda *i: te.max(add(*i), tirx.const(0, "float32")), name="relu")
    return [x, wt, bias, out]


def _depthwise(n, c, h, w, r, s, stride, pad):
    x, wt = _ph((n, c, h, w), "X"), _ph((c, 1, r, s), "W")
    return [x, wt, topi.nn.depthwise_conv2d_nchw(x, wt, stride, pad, 1)]


def _softmax(m, n):
    x = _ph((m, n), "X")
    return [x, topi.nn.softmax(x, axis=-1)]


def _layer_norm(m, n):
    x, gamma, beta = _ph((m, n), "X"), _ph((n,), "gamma"), _ph((n,), "beta")
    return [x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[-1], epsilon=1e-5)]


def _elementwise(*shape):
    """bias add -> x * sigmoid(1.702 x) (GELU approximation) -> scale: three stages to fuse."""
    x, bias = _ph(shape, "X"), _ph((shape[-1],), "bias")
    add = te.compute(shape, lambda *i: x(*i) + bias[i[-1]], name="bias_add")
    act = te.compute(shape, lambda *i: add(*i) * te.sigmoid(add(*i) * 1.702), name="gelu")
    out = te.compute(shape, lambda *i: act(*i) * 0.5, name="scale")
    return [x, bias, out]


def _gelu(*shape):
    """GELU, erf form (PyTorch's default, Relax's nn.gelu): 0.5 x (1 + erf(x / sqrt 2))."""
    x = _ph(shape, "X")
    return [x, te.compute(shape, lambda *i: x(*i) * (0.5 + te.erf(x(*i) * _SQRT1_2) * 0.5), name="gelu")]


def _gelu_tanh_of(v):
    """GELU, tanh form (GPT-2's NewGELU as exported to ONNX: the cube is a Pow)."""
    inner = _SQRT2_PI * (v + 0.044715 * te.power(v, tirx.const(3.0, "float32")))
    return 0.5 * v * (1.0 + te.tanh(inner))


def _gelu_tanh(*shape):
    x = _ph(shape, "X")
    return [x, te.compute(shape, lambda *i: _gelu_tanh_of(x(*i)), name="gelu_tanh")]


def _bias_gelu(*shape):
    """bias add -> GELU (tanh form): a transformer MLP's first activation."""
    x, bias = _ph(shape, "X"), _ph((shape[-1],), "bias")
    add = te.compute(shape, lambda *i: x(*i) + bias[i[-1]], name="bias_add")
    return [x, bias, te.compute(shape, lambda *i: _gelu_tanh_of(add(*i)), name="gelu_tanh")]


_SQRT1_2, _SQRT2_PI = 0.7071067811865476, 0.7978845608028654


# --- numpy references -------------------------------------------------------------------------------------------


def _conv_ref(x, w, stride, pad, groups=1):
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]
    if groups == 1:
        return np.einsum("nchwij,ocij->nohw", cols, w, optimize=True)
    return np.einsum("nchwij,cij->nchw", cols, w[:, 0], optimize=True)


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm_ref(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


def _elementwise_ref(x, bias):
    a = x + bias
    return a / (1 + np.exp(-1.702 * a)) * 0.5


def _gelu_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + special.erf(x * _SQRT1_2))


def _gelu_tanh_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(_SQRT2_PI * (x + 0.044715 * x**3)))


def _conv_out(h, r, stride, pad):
    return (h + 2 * pad - r) // stride + 1


def _conv_defaults(n, c, h, w, k, r, s, stride=1, pad=None):
    return (n, c, h, w, k, r, s, stride, (r - 1) // 2 if pad is None else pad)


def _dw_defaults(n, c, h, w, r, s, stride=1, pad=None):
    return (n, c, h, w, r, s, stride, (r - 1) // 2 if pad is None else pad)


CATALOG: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("matmul", ("M", "N", "K"), 3, _matmul, lambda a, b: a @ b, lambda m, n, k: 2.0 * m * n * k,
                 help="C[M,N] = A[M,K] @ B[K,N]"),
        Workload("batch_matmul", ("B", "M", "N", "K"), 4, _batch_matmul, lambda a, b: a @ b,
                 lambda bs, m, n, k: 2.0 * bs * m * n * k, help="C[B,M,N] = A[B,M,K] @ B[B,K,N]"),
        Workload("dense", ("M", "N", "K"), 3, _dense, lambda x, w, b: np.maximum(x @ w.T + b, 0),
                 lambda m, n, k: 2.0 * m * n * k + 2.0 * m * n, help="relu(X[M,K] @ W[N,K]^T + bias[N])"),
        Workload("conv2d", ("N", "C", "H", "W", "K", "R", "S", "stride", "pad"), 7, _conv2d,
                 lambda x, w, b, *s: np.maximum(_conv_ref(x, w, s[7], s[8]) + b[:, None, None], 0),
                 lambda n, c, h, w, k, r, s, st, p: (2.0 * c * r * s + 2)
                 * n * k * _conv_out(h, r, st, p) * _conv_out(w, s, st, p),
                 defaults=_conv_defaults, help="relu(conv2d_nchw(X, W) + bias), pad defaults to (R-1)/2"),
        Workload("depthwise_conv2d", ("N", "C", "H", "W", "R", "S", "stride", "pad"), 6, _depthwise,
                 lambda x, w, *s: _conv_ref(x, w, s[6], s[7], groups=x.shape[1]),
                 lambda n, c, h, w, r, s, st, p: 2.0 * r * s * n * c * _conv_out(h, r, st, p) * _conv_out(w, s, st, p),
                 defaults=_dw_defaults, help="depthwise_conv2d_nchw(X, W[C,1,R,S])"),
        Workload("softmax", ("M", "N"), 2, _softmax, _softmax_ref, lambda m, n: 5.0 * m * n,
                 help="softmax over the last axis"),
        Workload("layer_norm", ("M", "N"), 2, _layer_norm, _layer_norm_ref, lambda m, n: 8.0 * m * n,
                 help="layer norm over the last axis, with gamma and beta"),
        Workload("elementwise", ("D0", "D1", "D2", "D3"), 1, _elementwise, _elementwise_ref,
                 lambda *s: 7.0 * float(np.prod(s)), help="bias add -> x*sigmoid(1.702x) -> *0.5, any rank"),
        Workload("gelu", ("D0", "D1", "D2", "D3"), 1, _gelu, _gelu_ref, lambda *s: 5.0 * float(np.prod(s)),
                 help="0.5 x (1 + erf(x/sqrt2)), any rank"),
        Workload("gelu_tanh", ("D0", "D1", "D2", "D3"), 1, _gelu_tanh, _gelu_tanh_ref,
                 lambda *s: 9.0 * float(np.prod(s)), help="0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), any rank"),
        Workload("bias_gelu", ("D0", "D1", "D2", "D3"), 1, _bias_gelu, lambda x, b: _gelu_tanh_ref(x + b),
                 lambda *s: 10.0 * float(np.prod(s)), help="bias add -> GELU (tanh form), any rank"),
    ]
}

EXAMPLES = {
    "matmul": "512,512,512", "batch_matmul": "16,128,128,64", "dense": "128,768,768",
    "conv2d": "1,64,56,56,64,3,3", "depthwise_conv2d": "1,128,56,56,3,3", "softmax": "128,768",
    "layer_norm": "128,768", "elementwise": "128,768", "gelu": "128,3072", "gelu_tanh": "128,3072",
    "bias_gelu": "128,3072",
}


def get_workload(name: str) -> Workload:
    if name not in CATALOG:
        raise UnknownNameError("operator", name, list(CATALOG))
    return CATALOG[name]


def reference_outputs(name: str, shape: tuple[int, ...], inputs: list[np.ndarray]) -> np.ndarray:
    """The numpy reference for one catalog workload (shape already normalised)."""
    wl = get_workload(name)
    extra = shape if name in ("conv2d", "depthwise_conv2d") else ()
    return np.asarray(wl.reference(*inputs, *extra), dtype="float32")
