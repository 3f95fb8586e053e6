"""Move reshapes below matmuls and elementwise operators so that epilogues fuse with their matmul.

ONNX exporters write ``nn.Linear`` on a 3-D input as reshape(x, [M, K]) -> MatMul -> Add -> reshape back, and
TVM's FuseOps never fuses an injective operator (the reshape) into a matmul's group: the bias, the activation
(GELU: erf, add, multiply) and the residual add after it each become a separate pass over memory. This pass
rewrites, until nothing changes:

- ``matmul(reshape(x, [M, K]), W)`` with a 2-D ``W`` and a reshape that only merges the leading dims of ``x``
  -> ``reshape(matmul(x, W), [M, N])`` (the same products, batched);
- ``f(reshape(y, s))`` for an elementwise ``f``, and ``g(reshape(y, s), c)`` for a binary elementwise ``g``
  whose other operand is a scalar, a vector along the (unchanged) last dim, or ``reshape(z, s)`` of a ``z``
  shaped like ``y`` -> ``reshape(f(y), s)`` / ``reshape(g(y, c'), s)``;
- ``reshape(reshape(a, s1), s2)`` -> ``reshape(a, s2)``, and a reshape to ``a``'s own shape -> ``a``.

Every rewrite computes exactly the same values in the same order (elementwise ops commute with a reshape).
Then matmul + bias + activation + residual are one fusion group, and its epilogue runs in the matmul's
loop nest (see ``search_spaces/cpu.toml``: ``fuse_epilogues``).
"""

from __future__ import annotations

import math
from typing import Any

from autosched._tvm import IRModule, mutate_graph_functions, relax, tvm

UNARY = {"relax.erf", "relax.tanh", "relax.exp", "relax.sigmoid", "relax.sqrt", "relax.rsqrt", "relax.negative",
         "relax.abs", "relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.astype",
         "relax.clip", "relax.square", "relax.log", "relax.sin", "relax.cos"}
BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.power", "relax.maximum",
          "relax.minimum"}


def _shape(expr: Any) -> tuple[int, ...] | None:
    """The static shape of ``expr``; None if it is not a tensor of known shape."""
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    try:
        return tuple(int(v) for v in shape.values)
    except TypeError:  # symbolic dims
        return None


@relax.expr_functor.mutator
class _ReshapeSinker(relax.PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.n_rewritten = 0

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        rewritten = self._rewrite(call)
        if rewritten is None:
            return call
        self.n_rewritten += 1
        return rewritten

    def _reshape_source(self, expr: Any) -> tuple[Any, tuple[int, ...]] | None:
        """(y, s) if ``expr`` is a variable bound to ``reshape(y, s)`` with static shapes, else None."""
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if not (isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op)
                and bound.op.name == "relax.reshape"):
            return None
        source, target = bound.args[0], _shape(bound)
        return (source, target) if _shape(source) is not None and target is not None else None

    def _rewrite(self, call: Any) -> Any | None:
        name = call.op.name
        if name == "relax.reshape":
            return self._fold_reshape(call)
        if name == "relax.matmul":
            return self._sink_through_matmul(call)
        if name in UNARY:
            found = self._reshape_source(call.args[0])
            if found is None:
                return None
            return relax.op.reshape(relax.Call(call.op, [found[0], *call.args[1:]], call.attrs), found[1])
        if name in BINARY:
            return self._sink_through_binary(call)
        return None

    def _fold_reshape(self, call: Any) -> Any | None:
        found = self._reshape_source(call.args[0])
        target = _shape(call)
        if found is not None and target is not None:
            source = found[0]
            return source if _shape(source) == target else relax.op.reshape(source, target)
        if target is not None and _shape(call.args[0]) == target:
            return call.args[0]
        return None

    def _sink_through_matmul(self, call: Any) -> Any | None:
        found = self._reshape_source(call.args[0])
        weight = _shape(call.args[1])
        if found is None or weight is None or len(weight) != 2:
            return None
        source, merged = found
        x = _shape(source)
        if len(merged) != 2 or len(x) < 3 or x[-1] != merged[1] or math.prod(x[:-1]) != merged[0]:
            return None
        return relax.op.reshape(relax.Call(call.op, [source, call.args[1]], call.attrs), (merged[0], weight[1]))

    def _sink_through_binary(self, call: Any) -> Any | None:
        return sink_through_binary(call, self._reshape_source, self._matching_operand, relax.op.reshape)

    def _matching_operand(self, other: Any, source: tuple[int, ...], target: tuple[int, ...]) -> Any | None:
        """``other`` as an operand against the un-reshaped ``source`` giving the same values; None if none."""
        shape = _shape(other)
        if shape is None:
            return None
        if math.prod(shape) == 1 and len(shape) <= len(source):
            return other  # a scalar broadcasts the same either way
        if len(shape) == 1 and source[-1] == target[-1] == shape[0]:
            return other  # a vector along the last dim, which the reshape keeps
        found = self._reshape_source(other)
        if found is not None and found[1] == target and _shape(found[0]) == source:
            return found[0]
        return None


def sink_through_binary(call: Any, unwrap: Any, matching: Any, wrap: Any) -> Any | None:
    """``wrap(g(y, c'), how)`` for a binary ``g(wrapped, c)`` (either side) where ``unwrap(wrapped)`` gives
    ``(y, how)`` and ``matching(c, shape of y, how)`` gives ``c'``, an operand against ``y`` with the same
    values; None if neither side fits. Shared by the passes that move a reshape or a slice below such ops."""
    for side in (0, 1):
        found = unwrap(call.args[side])
        if found is None:
            continue
        inner, how = found
        other = matching(call.args[1 - side], _shape(inner), how)
        if other is None:
            continue
        args = [inner, other] if side == 0 else [other, inner]
        return wrap(relax.Call(call.op, args, call.attrs), how)
    return None


@tvm.transform.module_pass(opt_level=0, name="SinkReshapes")
def sink_reshapes(mod: IRModule, ctx: Any) -> IRModule:
    """Apply the rewrites of the module doc until none applies (at most 16 rounds)."""
    for _ in range(16):
        sinker = _ReshapeSinker(mod)
        changed = mutate_graph_functions(mod, sinker, lambda s=sinker: s.n_rewritten > 0)
        if changed is mod:
            return mod
        # a reshape folded away leaves ``y = x``: FuseOps stops at such aliases, so they are substituted
        mod = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(changed))
    return mod
