"""Small operator rewrites that keep TVM's own passes and code generation away from patterns they fail on.

Each fix is exact (the same values come out) and touches one operator:
- ``squeeze`` with a negative axis (torchvision's attention: ``squeeze(-2)``) makes ``ConvertLayout`` raise
  ``std::bad_alloc`` even in a module without convolutions: the axis is made positive.
- comparisons of two bool tensors (Hugging Face causal masks: ``equal``) make LLVM fail with
  ``fcmp oeq i1``, and a bool ``cumsum`` fails TVM's float check: bool operands are compared as int8, and a
  bool cumulative sum counts in int64 (what PyTorch computes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosched._tvm import IRModule, mutate_graph_functions, relax, tvm

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


_FIXES: dict[str, Callable[[Any], Any | None]] = {
    "relax.squeeze": _positive_squeeze,
    "relax.cumsum": _int64_cumsum,
    **{name: _int8_comparison for name in _COMPARISONS},
}


@relax.expr_functor.mutator
class _OpFixer(relax.PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.n_fixed = 0

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
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
