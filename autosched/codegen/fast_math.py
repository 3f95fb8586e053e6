"""Transcendental functions as plain float32 arithmetic, so LLVM vectorises them (zmm on AVX-512).

TVM lowers ``exp``/``tanh``/``erf``/``sigmoid``/``pow`` on CPU to libm calls, or to LLVM intrinsics that LLVM
scalarises into libm calls without a vector math library: a vectorised loop then calls ``expf`` 16 times per
zmm. ``rewrite`` replaces each float32 call in a PrimFunc by the expression below, before scheduling, so the
schedule's vectorised loops stay vectorised down to the machine code.

Accuracy against float64 numpy/scipy over dense sweeps of float32 inputs (bounds asserted by
``tests/codegen/test_fast_math.py``; measured worst case in brackets):
  exp      relative error <= 2e-7 [8.4e-8, under 1 ulp] where the result is a normal float32; subnormal
           results within 2e-45 absolute (one subnormal step); overflow (x > 88.72) gives inf, -inf gives 0;
  sigmoid  1 / (1 + exp(-x)): relative error <= 3e-7 [1.5e-7];
  tanh     relative and absolute error <= 4e-7 [2.9e-7] (Eigen's [13/6] rational on [-7.9, 7.9], +-1 beyond);
  erf      relative and absolute error <= 5e-7 [3.7e-7] (Eigen's [13/8] rational on [-4, 4], +-1 beyond);
  pow      x**2, x**3, x**4 as products: relative error <= 2.5e-7 [1.2e-7] (other exponents stay pow).
NaN stays NaN and +-inf give the limits, as in numpy. These are libm-class bounds (glibc's expf is within
1 ulp), so the rewrite is on by default in the CPU space (``[fast_math]`` in ``search_spaces/cpu.toml``);
taking an op out of that list keeps its libm call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from autosched._tvm import IRModule, expr_dtype, map_calls, structural_equal, structural_hash, tirx

log = logging.getLogger("autosched.codegen.fast_math")

F32 = "float32"
Expr = Any  # a TIR expression (tvm.ir.expr.Expr in TVM 0.27)


def _c(value: float) -> Expr:
    return tirx.const(value, F32)


def _bind(x: Expr, body: Callable[[Expr], Expr], name: str) -> Expr:
    """``body(x)`` with ``x`` evaluated once (a Let), unless it is already a variable or a constant. A load is
    bound too: inlining its producer puts an expression there, with Lets of its own, which a second use would
    define twice (an ill-formed function: LSTM's tanh of sigmoids inlined into a concatenation)."""
    if isinstance(x, (tirx.Var, tirx.FloatImm)):
        return body(x)
    var = tirx.Var(name, F32)
    return tirx.Let(var, x, body(var))


def _clamp(x: Expr, low: float, high: float) -> Expr:
    return tirx.Min(tirx.Max(x, _c(low)), _c(high))


def _keep_nan(x: Expr, y: Expr) -> Expr:
    """NaN in, NaN out (the clamps would turn a NaN into a number)."""
    return tirx.Select(tirx.isnan(x), x, y)


def _horner(x: Expr, coefficients: Iterable[float]) -> Expr:
    """c0 * x^n + ... + cn, highest degree first."""
    coefficients = list(coefficients)
    out = _c(coefficients[0])
    for c in coefficients[1:]:
        out = out * x + _c(c)
    return out


def _pow2(k: Expr) -> Expr:
    """2^k for an integral float ``k`` in [-126, 127], built in the exponent bits."""
    bits = tirx.shift_left(tirx.Cast("int32", k) + tirx.const(127, "int32"), tirx.const(23, "int32"))
    return tirx.reinterpret(F32, bits)


# Cephes expf: exp(x) = 2^m exp(r), m = round(x / ln 2), r = x - m ln 2 (ln 2 split in two for exactness).
_LOG2E, _LN2_HI, _LN2_LO = 1.44269504088896341, 0.693359375, -2.12194440e-4
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


def _exp(x: Expr) -> Expr:
    xc = _clamp(x, -104.0, 88.73)  # exp(-104) rounds to 0, exp(88.73) to inf
    return _keep_nan(x, _bind(xc, _exp_clamped, "exp_xc"))


def _exp_clamped(xc: Expr) -> Expr:
    m = tirx.floor(xc * _c(_LOG2E) + _c(0.5))  # the integer nearest to x / ln 2
    return _bind(m, lambda m: _exp_scaled(xc, m), "exp_m")


def _exp_scaled(xc: Expr, m: Expr) -> Expr:
    r = xc - m * _c(_LN2_HI) - m * _c(_LN2_LO)  # |r| <= ln(2) / 2
    y = _bind(r, lambda r: _horner(r, _EXP_P) * (r * r) + r + _c(1.0), "exp_r")
    half = tirx.floor(m * _c(0.5))  # 2^m as two factors, each a normal float: subnormal results round well
    return y * _pow2(half) * _pow2(m - half)


def fast_exp(x: Expr) -> Expr:
    return _bind(x, _exp, "exp_x")


def fast_sigmoid(x: Expr) -> Expr:
    return _bind(x, lambda v: _c(1.0) / (_c(1.0) + _exp(-v)), "sigmoid_x")


# Eigen's generic_fast_tanh_float: odd [13/6] rational on [-7.9053, 7.9053] (tanh is +-1 in float32 beyond).
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def _tanh(x: Expr) -> Expr:
    def ratio(xc: Expr) -> Expr:
        return _bind(xc * xc, lambda x2: xc * _horner(x2, _TANH_P) / _horner(x2, _TANH_Q), "tanh_x2")

    clamp = 7.90531110763549805
    small = tirx.Select(tirx.abs(x) < _c(0.0004), x, _bind(_clamp(x, -clamp, clamp), ratio, "tanh_xc"))
    return _keep_nan(x, small)  # below 0.0004, tanh(x) = x to float32 precision


def fast_tanh(x: Expr) -> Expr:
    return _bind(x, _tanh, "tanh_x")


# Eigen's generic_fast_erf_float (TVM's fast_erf): odd [13/8] rational on [-4, 4] (erf is +-1 beyond).
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _erf(x: Expr) -> Expr:
    def ratio(xc: Expr) -> Expr:
        return _bind(xc * xc, lambda x2: xc * _horner(x2, _ERF_P) / _horner(x2, _ERF_Q), "erf_x2")

    return _keep_nan(x, _bind(_clamp(x, -4.0, 4.0), ratio, "erf_xc"))


def fast_erf(x: Expr) -> Expr:
    return _bind(x, _erf, "erf_x")


def small_pow(x: Expr, y: Expr) -> Expr | None:
    """x**2, x**3, x**4 as products; None for other exponents."""
    if not isinstance(y, tirx.FloatImm) or y.value not in (2.0, 3.0, 4.0):
        return None
    n = int(y.value)
    return _bind(x, lambda v: v * v if n == 2 else (v * v * v if n == 3 else (v * v) * (v * v)), "pow_x")


FAST_OPS: dict[str, Callable[..., Expr | None]] = {
    "exp": fast_exp, "sigmoid": fast_sigmoid, "tanh": fast_tanh, "erf": fast_erf, "pow": small_pow,
}


def rewrite(mod: IRModule, ops: Iterable[str]) -> IRModule:
    """``mod`` with every float32 call to one of ``ops`` (names in ``FAST_OPS``) replaced by its expression.
    Cached: records of one task replay on one module. A hit must have the same names, not only the same
    structure: a trace finds its blocks by name, and the same layer norm of another model (``lv7_sum`` there,
    ``lv8_sum`` here) is structurally equal."""
    ops = tuple(op for op in ops if op in FAST_OPS)
    key = (structural_hash(mod), ops)
    hit = _CACHE.get(key)
    if hit is not None and (hit[0].same_as(mod) or (structural_equal(hit[0], mod) and hit[0].script() == mod.script())):
        return hit[1]
    if len(_CACHE) >= 256:
        _CACHE.clear()
    _CACHE[key] = (mod, _rewrite(mod, ops))
    return _CACHE[key][1]


_CACHE: dict[tuple[int, tuple[str, ...]], tuple[IRModule, IRModule]] = {}


def _fast_calls(ops: tuple[str, ...]) -> Callable[[Any], Expr]:
    """A call mapper: a float32 call to one of ``ops`` becomes its expression, any other call stays."""
    fast_by_op = {f"tirx.{op}": FAST_OPS[op] for op in ops}

    def fast(call: Any) -> Expr:
        fn = fast_by_op.get(getattr(call.op, "name", None))
        if fn is None or expr_dtype(call.args[0]) != F32:
            return call
        out = fn(*call.args)
        return call if out is None else out

    return fast


def _rewrite(mod: IRModule, ops: tuple[str, ...]) -> IRModule:
    fast = _fast_calls(ops)
    try:
        new = map_calls(mod, fast)
    except Exception as err:  # TVM raises TVMError & co.; the original stays correct
        log.warning("fast math: module kept as it was (%s)", str(err).splitlines()[0][:200] if str(err) else err)
        return mod
    if new.same_as(mod):
        return mod
    return _inline_rewritten(mod, _bind_low_precision_casts(new))


def _bind_low_precision_casts(mod: IRModule) -> IRModule:
    """Each cast of a float32 value to bfloat16 takes a variable (a Let): TVM's bf16 legalization rounds with
    its operand used twice, and once a rewritten producer (with its own Lets) is inlined into that operand, the
    copies bind the same variables and the vectorizer fails ("Let cannot bind the same var to two different
    values"; GELU before a bf16 matmul)."""
    from autosched._tvm import tvm_ffi

    def bind(cast: Any) -> Expr:
        if expr_dtype(cast) != "bfloat16" or expr_dtype(cast.value) != F32 or isinstance(cast.value, tirx.Var):
            return cast
        var = tirx.Var("to_bf16", F32)
        bits = tirx.call_intrin("uint32", "tirx.reinterpret", var)
        odd = tirx.bitwise_and(tirx.shift_right(bits, tirx.const(16, "uint32")), tirx.const(1, "uint32"))
        rounded = tirx.shift_right(bits + tirx.const(0x7FFF, "uint32") + odd, tirx.const(16, "uint32"))
        return tirx.Let(var, cast.value, tirx.call_intrin("bfloat16", "tirx.reinterpret",
                                                          tirx.Cast("uint16", rounded)))

    return tvm_ffi.structural_map(mod, [(tirx.Cast, bind)])


def _inline_rewritten(before: IRModule, after: IRModule) -> IRModule:
    """``after`` with each rewritten block that has one consumer inlined into it, where the original call was
    not an exp. MetaSchedule's auto_inline would have inlined the original (an erf, tanh, ... call), but it never
    inlines a block with a conditional (``disallow_if_then_else``), and the rewritten forms keep NaN with a
    select: without this, GELU's erf stays a separate pass after its matmul instead of fusing into its loop
    nest. Exp blocks stay (the space keeps softmax's exp out of its two consumers: ``disallow_op``). A block
    counts as rewritten when its text differs from the original's, so a consumer that an inlining changed is
    inlined in turn (GELU's erf, + 1 and x 0.5 end in its last multiply); tuning records replay on exactly this."""
    from autosched._tvm import Schedule

    sch, original = Schedule(after), Schedule(before)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        name = sch.get(block).name_hint
        try:
            old = original.get(original.get_sblock(name))
        except Exception:  # a block of that name is not in the original (never the case: names are kept)
            continue
        old_text = old.script()
        if "T.exp(" in old_text or len(sch.get_consumers(block)) != 1 or old_text == sch.get(block).script():
            continue
        try:
            sch.compute_inline(block)
        except Exception:  # ScheduleError: not inlinable (e.g. a reduction); it stays a block
            continue
    return sch.mod
