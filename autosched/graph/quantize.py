"""int8 as a graph rewrite with calibration: matmuls and convolutions against constant weights compute in
int8 x int8 -> int32.

The policy (``--precision int8``):
- a matmul whose second operand is a constant float32 weight [K, N], or a convolution (1-, 2- or 3-D, any
  layout, grouped or not) with a constant float32 kernel, becomes: the activation quantized per tensor
  (scale = max |x| over the calibration inputs / 127, symmetric, so zero padding stays exact; clipped to
  +-127), the weight quantized per output channel (scale[n] = max |W[n]| / 127 over the other axes, symmetric),
  an int32 product, and a float32 rescale by scale_x * scale_w[n] along the result's channel axis;
- kept in float32: every other operator, and the matmuls and convolutions whose result reaches a model output
  through no other matmul or convolution and no residual add (the logits: ``precision.final_products``).

Calibration runs the float32 model (an untuned build of it, at this point of the graph rewrites) on
``N_CALIBRATION`` random inputs with a fixed seed (float inputs standard normal, integer inputs zero, as
``InputSpec.random``), so tuning and compiling quantize alike and find the same tasks. Scales are tensors of
shape (1,) and (N,), never literals inside a kernel, so task keys do not depend on their values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched._tvm import IRModule, Target, cpu_device, mutate_graph_functions, relax, tvm
from autosched.graph.precision import LOW_PRECISION_OPS, final_products, output_channel_axes, remake_product, rescaled

N_CALIBRATION = 8
QMAX = 127.0


def _is_candidate(value: Any) -> bool:
    """A float32 matmul of an activation by a constant 2-D float32 weight, or a float32 convolution of an
    activation by a constant kernel."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in LOW_PRECISION_OPS):
        return False
    x, w = value.args[:2]
    return (isinstance(w, tvm.ir.GenericConst) and str(w.value.dtype) == "float32"
            and (value.op.name != "relax.matmul" or len(w.value.shape) == 2)
            and not isinstance(x, tvm.ir.GenericConst) and str(getattr(x.ty, "dtype", "")) == "float32")


def _candidates(func: relax.Function) -> list[Any]:
    """The candidate matmul and convolution calls of ``func`` in binding order, the final products left out."""
    final = final_products(func)
    return [b.value for block in func.body.blocks for b in block.bindings
            if isinstance(b, relax.VarBinding) and _is_candidate(b.value) and b.value not in final]


def _random_inputs(func: relax.Function, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for param in func.params:
        shape, dtype = [int(d) for d in param.ty.shape.values], str(param.ty.dtype)
        out.append(rng.standard_normal(shape).astype(dtype) if np.issubdtype(np.dtype(dtype), np.floating)
                   else np.zeros(shape, dtype))
    return out


def calibrate(mod: IRModule, target: Target, entry: str = "main", seed: int = 0) -> list[float]:
    """max |activation| of every candidate product of ``entry`` over ``N_CALIBRATION`` random inputs, from an
    untuned float32 build that returns those activations, made for this CPU (``target``'s own where it runs here:
    a build for another CPU may use instructions this one lacks)."""
    from autosched.targets import host_execution_target

    func = relax.transform.ToNonDataflow()(mod)[entry]
    activations = [call.args[0] for call in _candidates(func)]
    if not activations:
        return []
    outputs = relax.Tuple(activations)
    probe = relax.Function(func.params, relax.SeqExpr(func.body.blocks, outputs),
                           relax.TupleType([a.ty for a in activations]))
    probe_mod = IRModule({gv: f for gv, f in mod.functions_items() if gv.name_hint != entry})
    probe_mod["main"] = probe
    built = tvm.compile(relax.transform.LegalizeOps()(probe_mod), target=host_execution_target(target))
    vm = relax.VirtualMachine(built, cpu_device())
    peaks = np.zeros(len(activations))
    for i in range(N_CALIBRATION):
        outs = vm["main"](*[tvm.runtime.tensor(x) for x in _random_inputs(func, seed + i)])
        peaks = np.maximum(peaks, [float(np.abs(o.numpy()).max()) for o in outs])
    return [float(p) for p in peaks]


def _quantized_product(call: Any, x: Any, weight: np.ndarray, peak: float) -> Any:
    """``call`` (of ``x`` by the constant ``weight``) as int8 x int8 -> int32 and a float32 rescale."""
    w_axis = output_channel_axes(call)[0]
    other_axes = tuple(i for i in range(weight.ndim) if i != w_axis)
    scale_x = max(peak, 1e-12) / QMAX
    scale_w = np.maximum(np.abs(weight).max(axis=other_axes), 1e-12) / QMAX
    w_q = np.clip(np.round(weight / np.expand_dims(scale_w, other_axes)), -QMAX, QMAX).astype(np.int8)
    x_q = relax.op.astype(relax.op.clip(relax.op.round(relax.op.multiply(
        x, relax.const(np.array([1.0 / scale_x], np.float32)))), -QMAX, QMAX), "int8")
    return rescaled(call, remake_product(call, x_q, relax.const(w_q), "int32"), scale_x * scale_w)


@relax.expr_functor.mutator
class _Int8(relax.PyExprMutator):
    def __init__(self, mod: IRModule, peaks: dict[Any, float]) -> None:
        super().__init__(mod)
        self.peaks = peaks
        self.n_converted = 0

    def visit_call_(self, op: Any) -> Any:
        call = self.visit_expr_post_order(op)
        if op not in self.peaks:
            return call
        self.n_converted += 1
        return _quantized_product(call, call.args[0], op.args[1].value.numpy(), self.peaks[op])


def int8_pass(seed: int = 0) -> tvm.transform.Pass:
    """The rewrite of the module doc; runs inside a target scope (``run_passes``)."""

    @tvm.transform.module_pass(opt_level=0, name="QuantizeInt8")
    def rewrite(mod: IRModule, ctx: Any) -> IRModule:
        target = tvm.target.Target.current()
        entry = "main"
        candidates = _candidates(mod[entry])
        if not candidates:
            return mod
        peaks = calibrate(mod, target, entry, seed)
        converter = _Int8(mod, dict(zip(candidates, peaks, strict=True)))
        return mutate_graph_functions(mod, converter, lambda: converter.n_converted > 0)

    return rewrite
