"""Graph-level rewrites, fusion groups and task extraction.

``GRAPH_PASSES`` is the one ordered pass list used both to extract tasks (tuning) and to compile (inference),
so every tuned fusion group is found again, by key, when the model is built.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched._tvm import IRModule, PrimFunc, Target, estimate_flops, relax, tvm
from autosched.errors import GraphError
from autosched.graph.amx import amx_matmuls, is_hand_kernel
from autosched.graph.attention import fuse_attention
from autosched.graph.constant_folding import fold_simple_constants
from autosched.graph.op_fixes import fix_operator_patterns
from autosched.graph.padding import pad_awkward_matmuls
from autosched.graph.precision import mixed_precision_pass, precision_of
from autosched.graph.qdq import integer_qdq_products
from autosched.graph.quantize import int8_pass
from autosched.graph.reshape_sinking import sink_reshapes
from autosched.tasks import Task, primfunc_task

log = logging.getLogger("autosched.graph")

PATTERNS = {0: "elementwise", 1: "broadcast", 2: "injective", 3: "reduction", 4: "out-elementwise-fusable",
            7: "tuple", 8: "opaque"}


def _fold_batch_norm() -> tvm.transform.Pass:
    from tvm.relax.transform.fold_batch_norm_to_conv2d_for_inference import FoldBatchnormToConv2D

    return FoldBatchnormToConv2D()


def _nhwc_convolutions() -> tvm.transform.Pass:
    # Channels-last: output channels become the innermost spatial axis of every convolution, so a schedule
    # vectorises along them and register-blocks over pixels. In NCHW the innermost axis is x, only 7 wide in
    # ResNet's last stage, where kernels stalled near 100 GFLOPS (NHWC: 250+). Weight permutes fold away.
    return relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})


@dataclass(frozen=True)
class GraphPass:
    """One graph rewrite. ``optional``: a model it fails on goes on without it (the model is only slower);
    a required pass (legalization, fusion) that fails stops the model with a one-line ``GraphError``."""

    name: str  # shown by `autosched inspect` and in fallback lines
    make: Callable[[], tvm.transform.Pass]
    optional: bool = True


T = relax.transform
# Order matters: BN folds into conv weights while it is still a batch_norm op; constants fold at graph level
# (weights computed by constant subgraphs) and again after legalization; AttachAttrLayoutFreeBuffers lets
# schedules choose the layout of constant weights. Tuning and compiling run the same list and a pass that
# fails on a model fails the same way both times, so both see the same fusion groups.
GRAPH_PASSES: list[GraphPass] = [
    GraphPass("fix operator patterns TVM fails on", lambda: fix_operator_patterns),
    GraphPass("fold batch-norm into conv weights", _fold_batch_norm),
    GraphPass("decompose remaining ops for inference", T.DecomposeOpsForInference, optional=False),
    GraphPass("canonicalize bindings", T.CanonicalizeBindings),
    GraphPass("eliminate common subexpressions", T.EliminateCommonSubexpr),
    GraphPass("fold permutes and arithmetic of constants (numpy)", lambda: fold_simple_constants),
    GraphPass("fold constants", T.FoldConstant),
    GraphPass("eliminate dead code", T.DeadCodeElimination),
    GraphPass("fuse attention: softmax(Q K^T + mask) V as one kernel", lambda: fuse_attention),
    GraphPass("move reshapes below matmuls and elementwise ops (epilogues fuse)", lambda: sink_reshapes),
    GraphPass("pad matmul extents no tile divides (197 tokens, 50257 words)", lambda: pad_awkward_matmuls),
    GraphPass("convolutions to NHWC layout", _nhwc_convolutions),  # after DCE: it segfaults on unused BN outputs
    GraphPass("permute weights to OHWI (numpy)", lambda: fold_simple_constants),
    GraphPass("fold constants (weights to OHWI)", T.FoldConstant),
    GraphPass("legalize ops to TIR", T.LegalizeOps, optional=False),
    GraphPass("annotate op patterns", T.AnnotateTIROpPattern, optional=False),
    GraphPass("fold constants (legalized)", T.FoldConstant),
    GraphPass("eliminate dead code (legalized)", T.DeadCodeElimination),
    GraphPass("fuse ops into groups", T.FuseOps),
    GraphPass("merge each group into one PrimFunc", T.FuseTIR, optional=False),
    GraphPass("eliminate dead code (fused)", T.DeadCodeElimination),
    GraphPass("re-annotate op patterns", T.AnnotateTIROpPattern, optional=False),
    GraphPass("mark constant weights layout-free", T.AttachAttrLayoutFreeBuffers),
]

# After the schedules are in: weight-layout rewrites that schedules inserted move out of the kernels into
# their own functions, which constant folding then evaluates once at compile time.
FINISH_PASSES: list[GraphPass] = [
    GraphPass("split weight-layout rewrites", T.SplitLayoutRewritePreproc),
    GraphPass("fold rewritten weights", T.FoldConstant),
    GraphPass("eliminate dead code", T.DeadCodeElimination),
]


@dataclass(frozen=True)
class Fallback:
    """A graph rewrite a model went on without, and why (one line)."""

    step: str
    reason: str

    def __str__(self) -> str:
        return f"{self.step}: skipped ({self.reason})"


_OP_NAME = re.compile(r"\b(relax\.[a-z_][\w.]*)")


def failure_reason(err: BaseException) -> str:
    """A TVM exception as one line: the operator it names (if any) and the first line of its message."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip() and not ln.lstrip().startswith(("File ", "^"))]
    message = next((ln for ln in reversed(lines) if "Error" in ln or "Check failed" in ln), lines[-1] if lines else "")
    message = re.sub(r"^\S*(Error|Exception):\s*", "", message)[:240] or type(err).__name__
    ops = sorted({m for m in _OP_NAME.findall(str(err)) if m not in ("relax.transform", "relax.frontend")})
    where = f"operator {', '.join(ops[:3])}: " if ops else ""
    return f"{where}{type(err).__name__}: {message}"


@dataclass
class PassChange:
    name: str
    before: Counter
    after: Counter
    seconds: float

    @property
    def changed(self) -> dict[str, int]:
        keys = set(self.before) | set(self.after)
        return {k: self.after[k] - self.before[k] for k in sorted(keys) if self.after[k] != self.before[k]}


def op_counts(mod: IRModule) -> Counter:
    """Operators called by the graph functions (Relax ops by name, TIR calls by their function's stem)."""
    counts: Counter = Counter()

    def visit(expr: object) -> None:
        if not isinstance(expr, relax.Call):
            return
        op = expr.op
        if isinstance(op, tvm.ir.Op):
            if op.name in ("relax.call_tir", "relax.call_tir_inplace"):
                counts["tir:" + _stem(expr.args[0].name_hint)] += 1
            else:
                counts[op.name.removeprefix("relax.")] += 1
        elif isinstance(op, tvm.ir.GlobalVar):
            counts["call:" + _stem(op.name_hint)] += 1

    for _, func in _graph_functions(mod):
        relax.analysis.post_order_visit(func, visit)
    return counts


def _stem(name: str) -> str:
    return re.sub(r"\d+$", "", name)


def _graph_functions(mod: IRModule) -> list[tuple[str, relax.Function]]:
    return [(gv.name_hint, f) for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and not int((f.attrs or {}).get("Primitive", 0))]


def run_passes(mod: IRModule, target: Target, passes: list[GraphPass],
               on_pass: Callable[[PassChange], None] | None = None, fallbacks: list[Fallback] | None = None,
               model_name: str = "the model") -> IRModule:
    """Apply ``passes`` in order. An optional pass that raises is skipped (the module stays as it was, a
    ``Fallback`` is appended to ``fallbacks`` and logged); a required one raises ``GraphError``."""
    with target:
        for p in passes:
            before = op_counts(mod) if on_pass else None
            start = time.perf_counter()
            try:
                new = p.make()(mod)
            except Exception as err:  # TVM raises InternalError, TVMError, AssertionError, ValueError, ...
                reason = failure_reason(err)
                if not p.optional:
                    raise GraphError(f"{model_name}: graph rewrite '{p.name}' failed on {reason}") from err
                log.warning("%s: '%s' skipped: %s", model_name, p.name, reason)
                if fallbacks is not None:
                    fallbacks.append(Fallback(p.name, reason))
                new = mod
            mod = new
            if on_pass:
                on_pass(PassChange(p.name, before, op_counts(mod), time.perf_counter() - start))
    return mod


def graph_passes(precision: str = "fp32") -> list[GraphPass]:
    """``GRAPH_PASSES``, with the mixed-precision rewrite (``autosched.graph.precision``) just before
    legalization when ``precision`` is not fp32: after batch norms folded into convolution weights and layouts
    chosen, so it sees the final matmuls and convolutions. int8 also computes a QDQ model's quantized products
    in integers (``autosched.graph.qdq``), before constant folding turns its int8 weights into float ones."""
    if precision == "fp32":
        return GRAPH_PASSES
    at = next(i for i, p in enumerate(GRAPH_PASSES) if p.name == "legalize ops to TIR")
    amx = []  # bf16 and int8 products go to AMX kernels where the target has AMX, bf16 to AVX512-BF16's else
    if precision in ("bf16", "int8"):
        amx = [GraphPass(f"{precision} matmuls against constant weights on AMX tiles (bf16: or AVX512-BF16)",
                         lambda: amx_matmuls)]
    if precision == "int8":  # a QDQ model's own quantized products first: before constant folding dequantizes
        mixed = GraphPass("matmuls and convolutions against weights in int8 (calibrated), int32 accumulation",
                          int8_pass, optional=False)
        qdq = GraphPass("quantized (QDQ) matmuls and convolutions in integers", lambda: integer_qdq_products,
                        optional=False)
        return [GRAPH_PASSES[0], qdq, *GRAPH_PASSES[1:at], mixed, *amx, *GRAPH_PASSES[at:]]
    mixed = GraphPass(f"matmuls and convolutions in {precision}, float32 accumulation",
                      lambda: mixed_precision_pass(precision), optional=False)
    return [*GRAPH_PASSES[:at], mixed, *amx, *GRAPH_PASSES[at:]]


def rewrite(mod: IRModule, target: Target, on_pass: Callable[[PassChange], None] | None = None,
            fallbacks: list[Fallback] | None = None, model_name: str = "the model") -> IRModule:
    """The graph rewrites: a Relax module in, one PrimFunc per fusion group out (called from ``main``); a
    module marked with a precision (``precision.with_precision``) gets that rewrite too."""
    return run_passes(mod, target, graph_passes(precision_of(mod)), on_pass, fallbacks, model_name)


@dataclass
class FusionGroup:
    name: str
    func: PrimFunc
    pattern: str
    weight: int  # calls per inference
    n_outputs: int
    args: tuple = ()  # the first call's arguments (constants are the weights)

    @property
    def flops(self) -> float:
        return estimate_flops(IRModule({"main": self.func}))

    @property
    def constants(self) -> dict[int, Any]:
        """The constant arguments (weights, masks, position tables) by position, as TVM tensors: a task is
        checked and timed with the model's own values (random weights put GELU's erf off its fast path and
        random masks or positions out of their range)."""
        return {i: arg.value for i, arg in enumerate(self.args) if isinstance(arg, tvm.ir.GenericConst)}


def fusion_groups(fused: IRModule) -> list[FusionGroup]:
    """Every PrimFunc the graph calls, with how often it is called (in order of first call)."""
    calls: dict[str, list] = {}

    def visit(expr: object) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name.startswith(
                "relax.call_tir"):
            calls.setdefault(expr.args[0].name_hint, []).append(expr)

    for _, func in _graph_functions(fused):
        relax.analysis.post_order_visit(func, visit)
    groups = []
    for name, call_list in calls.items():
        func = fused[name]
        if is_hand_kernel(func):  # written by hand (AMX): nothing to search or apply
            continue
        args = tuple(call_list[0].args[1].fields)
        pattern = PATTERNS.get(int(func.attrs["op_pattern"]), "opaque") if "op_pattern" in func.attrs else "opaque"
        groups.append(FusionGroup(name, func, pattern, len(call_list), len(func.params) - len(args), args))
    return groups


def group_module(func: PrimFunc) -> IRModule:
    """A fusion group's PrimFunc as the module a task tunes (the same normal form at tune and compile time).

    A standalone PrimFunc needs a global symbol to build; ``ungroup`` takes it off again for the graph."""
    return IRModule({"main": func.with_attr("global_symbol", "main")})


def ungroup(func: PrimFunc) -> PrimFunc:
    """A scheduled task PrimFunc, ready to go back into the graph in place of its fusion group."""
    return func.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)


def extract_tasks(fused: IRModule, target: Target, space_version: int) -> list[Task]:
    """One task per distinct fusion group (equal PrimFuncs merged, their call counts summed into the weight)."""
    by_key: dict[str, Task] = {}
    for group in fusion_groups(fused):
        task = primfunc_task(group.name, group_module(group.func), target, space_version, group.weight,
                             group.n_outputs)
        task.info.update(pattern=group.pattern, group=group.name)
        task.constants = group.constants  # identical groups share a key: the first group's values are used
        if task.key in by_key:
            by_key[task.key].weight += group.weight
        else:
            by_key[task.key] = task
    for task in by_key.values():
        task.info["weight"] = task.weight  # stored with the task: reports weigh the end-to-end estimate by it
    return list(by_key.values())


@dataclass
class MemoryPlan:
    unplanned_bytes: int  # every intermediate in its own allocation
    planned_bytes: int  # after TVM's static memory planning (storage reused between intermediates)
    n_tensors: int
    n_storages: int


def memory_plan(fused: IRModule, target: Target) -> MemoryPlan:
    """Peak memory of intermediates, before and after ``StaticPlanBlockMemory`` (static shapes only)."""
    lowered = run_passes(fused, target, [GraphPass(p.__name__, p, optional=False) for p in (
        T.RewriteDataflowReshape, T.ToNonDataflow, T.RemovePurityChecking, T.CallTIRRewrite)])
    planned = run_passes(lowered, target, [GraphPass("static memory planning", T.StaticPlanBlockMemory, False)])
    tensors, _ = _allocations(lowered)
    left, storages = _allocations(planned)
    return MemoryPlan(sum(tensors), sum(left) + sum(storages), len(tensors), len(storages))


def _allocations(mod: IRModule) -> tuple[list[int], list[int]]:
    """Byte sizes of ``builtin.alloc_tensor`` and ``memory.alloc_storage`` calls in the graph functions."""

    tensors: list[int] = []
    storages: list[int] = []

    def visit(expr: object) -> None:
        if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)):
            return
        if expr.op.name == "relax.builtin.alloc_tensor":
            shape = [int(v) for v in expr.args[0].values]
            dtype = np.dtype(str(expr.args[1].value))
            tensors.append(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        elif expr.op.name == "relax.memory.alloc_storage":
            storages.append(int(expr.args[0].values[0]))

    for _, func in _graph_functions(mod):
        relax.analysis.post_order_visit(func, visit)
    return tensors, storages
