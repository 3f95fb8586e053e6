"""The CUDA rules of a space whose tensor-core designs stage their output where float32 accumulation builds.

TVM 0.27's CUDA rules for tensor-core GPUs (``ScheduleRule::DefaultCUDATensorCore``: sm_75 and later) stage a
wmma design's output tile in dynamic shared memory beside its float16 operands; the build merges them into one
float16 buffer, and storing the float32 accumulator through it fails (``tvm_access_ptr element type must match the
source buffer (float16 vs float32)``): no float16 matmul accumulating in float32 built (bench/cuda_spaces.py). With
the output staged in static shared memory (``[tensor_core] output_scope = "shared"``) every design builds for sm_80
and sm_90. The rules are TVM's own otherwise: its list, with its wmma rule rebuilt with that one change.
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import Target, load_tensor_intrins, ms

MIN_TENSOR_CORE_ARCH = 75  # the arch from which TVM picks its tensor-core rules (GetRuleKindFromTarget)
# TVM's wmma groups: (accumulator, operands, compute) for f32 += f16 * f16, f16 += f16 * f16, s32 += s8 * s8
WMMA_KINDS = (("f32", "f16", "f16f16f32"), ("f16", "f16", "f16f16f16"), ("s32", "s8", "s8s8s32"))


def uses_tensor_cores(target: Target) -> bool:
    arch = str(target.attrs.get("arch", ""))
    return target.kind.name == "cuda" and arch.startswith("sm_") and arch[3:].isdigit() \
        and int(arch[3:]) >= MIN_TENSOR_CORE_ARCH


def wmma_groups(output_scope: str) -> list[dict[str, str]]:
    """TVM's wmma intrinsic groups (operands loaded from dynamic shared memory), the output stored to
    ``output_scope`` ("shared" or "shared.dyn")."""
    store = "shared" if output_scope == "shared" else "shared_dyn"
    return [{"init": f"wmma_fill_16x16x16_{acc}", "load_a": f"wmma_load_16x16x16_{ab}_a_shared_dyn",
             "load_b": f"wmma_load_16x16x16_{ab}_b{trans}_shared_dyn", "compute": f"wmma_sync_16x16x16_{mma}{trans}",
             "store": f"wmma_store_16x16x16_{acc}_{store}"}
            for acc, ab, mma in WMMA_KINDS for trans in ("", "_trans")]


def tensor_core_rules(target: Target, output_scope: str) -> list[Any] | None:
    """TVM's CUDA tensor-core rules with the wmma rule's output staged in ``output_scope``; None where TVM would
    not pick its tensor-core rules (not CUDA, or before sm_75): the space then takes TVM's rules for the target."""
    if not uses_tensor_cores(target):
        return None
    load_tensor_intrins(target)  # the rules name TVM's wmma intrinsics: registered first
    sr = ms.schedule_rule
    rules = list(sr.ScheduleRule.create("cuda-tensorcore"))
    wmma = [i for i, r in enumerate(rules) if type(r).__name__ == "MultiLevelTilingTensorCore"][0]  # the first
    rules[wmma] = sr.MultiLevelTilingTensorCore(  # as TVM's, but for the output's scope
        intrin_groups=wmma_groups(output_scope), structure="SSSRRSRS",
        tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"], max_innermost_factor=4,
        vector_load_lens=[1, 2, 3, 4, 8, 16], reuse_read=sr.ReuseType("must", [4], "shared.dyn"),
        reuse_write=sr.ReuseType("must", [2], output_scope), use_software_pipeline=False)
    return rules
