"""Small operator rewrites that keep TVM's own passes and code generation away from patterns they fail on.

Each fix is exact (the same values come out) and touches one operator:
- ``squeeze`` with a negative axis (torchvision's attention: ``squeeze(-2)``) makes ``ConvertLayout`` raise
  ``std::bad_alloc`` even in a module without convolutions: the axis is made positive.
- comparisons of two bool tensors (Hugging Face causal masks: ``equal``) make LLVM fail with
  ``fcmp oeq i1``, and a bool ``cumsum`` fails TVM's float check: bool operands are compared as int8, and a
  bool cumulative sum counts in int64 (what PyTorch computes).
- TVM's ONNX importer writes ``Clip`` (ReLU6 in MobileNets) as calls of TIR functions (``topi.maximum`` and
  ``topi.minimum`` against a scalar), which have no layout rule: ``ConvertLayout`` wraps each one in transposes
  back to NCHW and out again (a fifth of a tuned MobileNetV2's time). A call of a function that is exactly
  topi's (checked structurally) becomes the Relax operator, whose rule keeps channels-last.
- ``HardSwish`` and ``HardSigmoid`` (MobileNetV3's activations and squeeze-excitation gates) come as the Relax
  ``clip``, which has no layout rule either: the same transposes, in 8-9 GFLOPS groups that were a fifth of a
  tuned MobileNetV3-L. ``clip(x, lo, hi)`` becomes ``maximum(minimum(x, hi), lo)`` with scalar constants, the
  order of topi's ``clip`` (so NaN comes out the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosched._tvm import IRModule, mutate_graph_functions, relax, structural_equal, te, topi, tvm

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_COMPARISONS = ("relax.equal", "relax.not_equal", "relax.less", "relax.less_equal", "relax.greater",
                "relax.greater_equal")


def _dtype(expr: Any) -> str | None:
    return str(getattr(expr.ty, "dtype", "")) or None


def _positive_squeeze(call: Any) -> Any | None:
    axes, ndim = call.attrs.axis, getattr(call.args[0].ty, "ndim", -1)
    if axes is None or ndim < 0 or all(int(a) >= 0 for a in axes):
        return None
    return relax.op.squeeze(call.args[0], [int(a) % ndim for a in axes])


def _int8_comparison(call: Any) -> Any | None:
    if not all(_dtype(a) == "bool" for a in call.args):
        return None
    make = getattr(relax.op, call.op.name.removeprefix("relax."))
    return make(*(relax.op.astype(a, "int8") for a in call.args))


def _int64_cumsum(call: Any) -> Any | None:
    if _dtype(call.args[0]) != "bool":
        return None
    return relax.op.cumsum(relax.op.astype(call.args[0], "int64"), call.attrs.axis, "int64", call.attrs.exclusive)


def _clip_as_min_max(call: Any) -> Any | None:
    dtype = _dtype(call.args[0])
    bounds = [getattr(a, "value", None) for a in call.args[1:3]]  # IntImm / FloatImm, or a PrimValue of one
    bounds = [getattr(b, "value", b) for b in bounds]
    if dtype is None or not all(isinstance(b, int | float) for b in bounds):
        return None
    lo, hi = (relax.const(b, dtype) for b in bounds)
    return relax.op.maximum(relax.op.minimum(call.args[0], hi), lo)


_FIXES: dict[str, Callable[[Any], Any | None]] = {
    "relax.squeeze": _positive_squeeze,
    "relax.clip": _clip_as_min_max,
    "relax.cumsum": _int64_cumsum,
    **{name: _int8_comparison for name in _COMPARISONS},
}


_TOPI_AS_RELAX = {"maximum": (topi.maximum, relax.op.maximum), "minimum": (topi.minimum, relax.op.minimum)}


def _relax_elementwise(call: Any, mod: IRModule) -> Any | None:
    """``call_tir(f, (x, s))`` with ``f`` exactly ``topi.maximum``/``minimum`` of ``x`` and a scalar ``s``, as the
    Relax operator."""
    callee, args = call.args[0], call.args[1]
    if not isinstance(callee, relax.GlobalVar) or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
        return None
    name = next((n for n in _TOPI_AS_RELAX if callee.name_hint.startswith(n)), None)
    x, scalar = args.fields
    shape, dtype = getattr(x.ty, "shape", None), _dtype(x)
    if name is None or shape is None or dtype is None or getattr(scalar.ty, "ndim", -1) != 0 \
            or _dtype(scalar) != dtype or not isinstance(mod[callee], tvm.tirx.PrimFunc):
        return None
    make_te, make_relax = _TOPI_AS_RELAX[name]
    a, b = te.placeholder(list(shape.values), dtype), te.placeholder((), dtype)
    topi_func = te.create_prim_func([a, b, make_te(a, b)]).with_attr("global_symbol", "f")
    if not structural_equal(mod[callee].with_attr("global_symbol", "f"), topi_func):
        return None
    return make_relax(x, scalar)


@relax.expr_functor.mutator
class _OpFixer(relax.PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.mod = mod
        self.n_fixed = 0

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        if call.op == _CALL_TIR:
            fixed = _relax_elementwise(call, self.mod)
        else:
            fix = _FIXES.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
            fixed = fix(call) if fix else None
        if fixed is None:
            return call
        self.n_fixed += 1
        return fixed


@tvm.transform.module_pass(opt_level=0, name="FixOperatorPatterns")
def fix_operator_patterns(mod: IRModule, ctx: Any) -> IRModule:
    """Apply every fix in ``_FIXES`` to the graph functions (see the module doc)."""
    fixer = _OpFixer(mod)
    return mutate_graph_functions(mod, fixer, lambda: fixer.n_fixed > 0)
