"""Pad matmul extents that no tile size divides well: ViT's 197 tokens, GPT-2's 50257-word vocabulary.

Schedules tile every loop by divisors of its extent. A prime extent leaves tiles of 1 or all of it: 197 rows
cannot be blocked into registers (each loaded weight vector feeds one FMA), and 50257 columns cannot be split
into vector lanes at all, so those matmuls ran at 80-100 GFLOPS beside 150+ for their neighbours. This pass
rewrites ``y = matmul(x, W)`` with a constant 2-D ``W`` whose rows (M: the one axis of ``x`` before the last
that is longer than 1, ``[1, 197, 768]`` or sequence-first ``[197, 1, 768]``) or columns (N: ``W``'s last dim)
are such an extent into

    y = strided_slice(matmul(pad(x, M -> Mp), pad(W, N -> Np)), M and N back to their extents)

with zero padding (``W``'s padding is folded into the constant: free at run time; ``x``'s is a small copy).
The slice then moves below elementwise ops that read it (bias, GELU's erf/add/multiply, ...), as long as their
other operand broadcasts along the padded axes or is a constant that can be padded too, so the matmul's
epilogue still fuses with it. Padded rows and columns are computed and dropped: the kept values are exactly
those of the original (the same products, summed in the same order). Two such matmuls in a row (ViT's MLP:
fc1, GELU, fc2) pass the padded rows on, with no slice and pad between them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched._tvm import IRModule, mutate_graph_functions, relax, tvm
from autosched.graph.reshape_sinking import BINARY, UNARY, _shape, sink_through_binary

MAX_EXTRA = 0.10  # never pad by more than this share of an extent (work spent on dropped rows/columns)
SMALL_EXTRA = 0.02  # the coarsest granularity whose padding costs at most this is taken
ROW_GRANULES = (16, 8)  # M becomes a multiple of one of these (register blocks of 4-16 rows divide it)
COLUMN_GRANULES = (64, 32, 16, 8)  # N becomes a multiple of one of these (vector lanes, several vectors)


def padded_rows(m: int) -> int:
    """M unchanged unless it is at least 32 and no number in 4..16 divides it."""
    if m < 32 or any(m % d == 0 for d in range(4, 17)):
        return m
    return _padded(m, ROW_GRANULES)


def padded_columns(n: int) -> int:
    """N unchanged unless it is at least 64 and not a multiple of 8 (a vector of fp32 lanes)."""
    if n < 64 or n % 8 == 0:
        return n
    return _padded(n, COLUMN_GRANULES)


def _padded(n: int, granules: tuple[int, ...]) -> int:
    options = [-(-n // g) * g for g in granules]  # coarsest granularity first
    for padded in options:
        if padded - n <= SMALL_EXTRA * n:
            return padded
    padded = options[-1]
    return padded if padded - n <= MAX_EXTRA * n else n


def _constant_array(expr: Any) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.GenericConst) else None  # TVM 0.27's relax constant


def _pad_width(rank: int, axis: int, extra: int) -> list[int]:
    widths = [0] * (2 * rank)
    widths[2 * axis + 1] = extra
    return widths


@relax.expr_functor.mutator
class _MatmulPadder(relax.PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.n_padded = 0
        # the slices this pass made: slice expression -> (padded source, {axis (from the end): kept extent})
        self._slices: list[tuple[Any, Any, dict[int, int]]] = []

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        name = call.op.name
        if name == "relax.matmul":
            padded = self._pad_matmul(call)
            return call if padded is None else padded
        if name in UNARY:
            found = self._our_slice(call.args[0])
            if found is None:
                return call
            return self._slice(relax.Call(call.op, [found[0], *call.args[1:]], call.attrs), found[1])
        if name in BINARY:
            sunk = self._sink_through_binary(call)
            return call if sunk is None else sunk
        return call

    def _pad_matmul(self, call: Any) -> Any | None:
        x, weight = _shape(call.args[0]), _constant_array(call.args[1])
        if x is None or len(x) < 2 or weight is None or weight.ndim != 2 or _shape(call) is None:
            return None
        if str(getattr(call.args[0].ty, "dtype", "")) not in ("float32", "float16", "bfloat16"):
            return None
        rows = [a for a in range(len(x) - 1) if x[a] > 1]  # M: the one leading axis longer than 1, if any
        m, n = (x[rows[0]] if len(rows) == 1 else 1), weight.shape[1]
        mp, np_ = padded_rows(m), padded_columns(n)
        if (mp, np_) == (m, n):
            return None
        data, kept = call.args[0], {}
        if mp != m:
            axis = rows[0] - len(x)
            found = self._our_slice(data)
            if found is not None and found[1] == {axis: m} and _shape(found[0])[axis] == mp:
                data = found[0]  # already padded so by the matmul before (its extra rows are not zero, but an
            else:  # output row reads only its own input row, and extra rows are dropped): no slice, no pad
                data = relax.op.nn.pad(data, _pad_width(len(x), rows[0], mp - m))
            kept[axis] = m
        if np_ != n:
            weight = np.pad(weight, [(0, 0), (0, np_ - n)])
            kept[-1] = n
        self.n_padded += 1
        return self._slice(relax.Call(call.op, [data, relax.const(weight)], call.attrs), kept)

    def _slice(self, padded: Any, kept: dict[int, int]) -> Any:
        padded = self.builder_.normalize(padded)
        rank = len(_shape(padded))
        axes = sorted(rank + a for a in kept)
        sliced = self.builder_.normalize(relax.op.strided_slice(
            padded, axes=axes, begin=[0] * len(axes), end=[kept[a - rank] for a in axes]))
        self._slices.append((sliced, padded, kept))
        return sliced

    def _our_slice(self, expr: Any) -> tuple[Any, dict[int, int]] | None:
        """(padded source, kept extents) if ``expr`` is bound to a slice this pass made."""
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr
        for sliced, padded, kept in self._slices:
            if bound is not None and bound.same_as(sliced):
                return padded, kept
        return None

    def _sink_through_binary(self, call: Any) -> Any | None:
        return sink_through_binary(call, self._our_slice, self._matching_operand, self._slice)

    def _matching_operand(self, other: Any, padded: tuple[int, ...], kept: dict[int, int]) -> Any | None:
        """``other`` as an operand against the padded tensor giving the same kept values; None if none."""
        shape = _shape(other)
        if shape is None or len(shape) > len(padded):
            return None
        found = self._our_slice(other)
        if found is not None and found[1] == kept and _shape(found[0]) == padded:
            return found[0]  # sliced the same way from a tensor of the same padded shape
        along = {a: shape[a] for a in kept if -a <= len(shape)}  # its extents along the padded axes
        if all(extent == 1 for extent in along.values()):
            return other  # broadcasts along every padded axis
        array = _constant_array(other)
        if array is None or any(extent != kept[a] for a, extent in along.items() if extent != 1):
            return None
        widths = [(0, 0)] * array.ndim
        for a, extent in along.items():
            if extent != 1:
                widths[array.ndim + a] = (0, padded[len(padded) + a] - extent)
        return relax.const(np.pad(array, widths))


@tvm.transform.module_pass(opt_level=0, name="PadAwkwardMatmuls")
def pad_awkward_matmuls(mod: IRModule, ctx: Any) -> IRModule:
    """The rewrite of the module doc; slices left unused by it are removed."""
    padder = _MatmulPadder(mod)
    changed = mutate_graph_functions(mod, padder, lambda: padder.n_padded > 0)
    if changed is mod:
        return mod
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(changed))
