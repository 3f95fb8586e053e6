"""Fast constant folding of the simple operators that dominate a model's constant subgraphs, in numpy.

Relax's ``FoldConstant`` builds and runs a TVM kernel for every distinct shape it folds: 368 weight permutes of
DenseNet-121 took 15 s. Permutes, reshapes and the elementwise arithmetic of a batch norm's scale and shift are
exact in numpy (the same IEEE operations), so this pass folds them first; ``FoldConstant`` still handles the
rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from autosched._tvm import IRModule, mutate_graph_functions, relax, tvm


def _output_shape(call: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in call.ty.shape.values)  # TVM 0.27: struct_info became ty
    except (AttributeError, TypeError, ValueError):
        return None  # symbolic or unknown


def _reshaped(call: Any, args: list[np.ndarray]) -> np.ndarray | None:
    shape = _output_shape(call)
    return None if shape is None else args[0].reshape(shape)


def _permuted(call: Any, args: list[np.ndarray]) -> np.ndarray:
    axes = call.attrs.axes
    return np.transpose(args[0], None if axes is None else [int(a) for a in axes])


_FOLDERS: dict[str, Callable[[Any, list[np.ndarray]], np.ndarray | None]] = {
    "relax.permute_dims": _permuted,
    "relax.reshape": _reshaped,
    "relax.expand_dims": _reshaped,
    "relax.squeeze": _reshaped,
    "relax.flatten": _reshaped,
    "relax.add": lambda call, a: a[0] + a[1],
    "relax.subtract": lambda call, a: a[0] - a[1],
    "relax.multiply": lambda call, a: a[0] * a[1],
    "relax.divide": lambda call, a: a[0] / a[1],
    "relax.sqrt": lambda call, a: np.sqrt(a[0]),
    "relax.rsqrt": lambda call, a: 1 / np.sqrt(a[0]),
    "relax.negative": lambda call, a: -a[0],
}
_FLOAT_ONLY = {"relax.divide", "relax.sqrt", "relax.rsqrt"}


@relax.expr_functor.mutator
class _NumpyFolder(relax.PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.n_folded = 0

    def _constant(self, expr: Any) -> np.ndarray | None:
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            expr = bound if bound is not None else expr
        if isinstance(expr, tvm.ir.GenericConst):  # TVM 0.27's relax constant
            return expr.value.numpy()
        if isinstance(expr, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):  # a scalar such as BN's epsilon
            return np.array(expr.value, dtype=str(expr.ty.dtype))  # TVM 0.27: dtype lives on ty
        return None

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        fold = _FOLDERS.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        if fold is None:
            return call
        args = [self._constant(a) for a in call.args if not isinstance(a, relax.ShapeExpr)]
        dtype = getattr(call.ty, "dtype", None)
        if not args or any(a is None for a in args) or dtype is None:
            return call
        if call.op.name in _FLOAT_ONLY and not np.issubdtype(np.dtype(str(dtype)), np.floating):
            return call
        value = fold(call, args)
        if value is None:
            return call
        self.n_folded += 1
        return relax.const(np.ascontiguousarray(value, dtype=str(dtype)))


@tvm.transform.module_pass(opt_level=0, name="FoldSimpleConstants")
def fold_simple_constants(mod: IRModule, ctx: Any) -> IRModule:
    """Fold permutes, reshapes and elementwise arithmetic of constants in numpy (see the module doc)."""
    folder = _NumpyFolder(mod)
    return mutate_graph_functions(mod, folder, lambda: folder.n_folded > 0)
