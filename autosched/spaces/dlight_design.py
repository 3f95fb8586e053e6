"""One more CUDA design: the schedule TVM's dlight rules give a function, as a design with no knobs.

dlight's GPU rules are hand-written schedules that are known to run well on NVIDIA GPUs (Relax's default GPU
build): a float16 matmul as a 128x128x64 block of 16 warps on wmma tensor cores with a two-stage software pipeline
(its operands and output staged in padded dynamic shared memory, float32 accumulation building), other matmuls and
convolutions as register-tiled SIMT kernels, norms and softmaxes as row reductions across a warp, the rest bound to
threads. As a design of the space it is a known-good point measured first (``TraceSearchSpace.default_schedule``
prefers it on a GPU: the tiled designs' own decisions are not legal there), recorded like any other candidate, and
the schedule the search has to beat.
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import IRModule, Target, Trace, s_tir


def dlight_rules() -> tuple[Any, ...]:
    """dlight's GPU rules in the order Relax's default build tries them (the first that applies wins)."""
    dl = s_tir.dlight
    return (dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback())


def dlight_design(mod: IRModule, target: Target) -> Trace | None:
    """The trace of the first dlight rule that schedules ``mod``'s function; None where none does (or one fails)."""
    func = mod["main"]
    with target:
        for rule in dlight_rules():
            try:
                sch = rule.apply(func, target, False)
            except Exception:  # noqa: BLE001 - a rule that fails on an unusual kernel (TVM raises many kinds)
                continue
            if sch is not None:
                return sch.trace
    return None
