"""The CUDA rules of a space whose tensor-core designs stage their output where float32 accumulation builds, and
the known-good tensor-core blocks a GPU search measures first.

TVM 0.27's CUDA rules for tensor-core GPUs (``ScheduleRule::DefaultCUDATensorCore``: sm_75 and later) stage a
wmma design's output tile in dynamic shared memory beside its float16 operands; the build merges them into one
float16 buffer, and storing the float32 accumulator through it fails (``tvm_access_ptr element type must match the
source buffer (float16 vs float32)``): no float16 matmul accumulating in float32 built (bench/cuda_spaces.py). With
the output staged in static shared memory (``[tensor_core] output_scope = "shared"``) every design builds for sm_80
and sm_90. The rules are TVM's own otherwise: its list, with its wmma rule rebuilt with that one change and a
bfloat16 group beside TVM's float16 and int8 ones.

A search draws its first settings at random, and a wmma design's random tilings are mostly illegal or poor: the
seeds are the block shapes hand-written GEMMs use (``TENSOR_CORE_BLOCKS``), queued after dlight's design.
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import Target, load_tensor_intrins, ms
from autosched.errors import InvalidConfig
from autosched.spaces.gpu_repair import is_vector_load
from autosched.spaces.knobs import with_tiles
from autosched.spaces.tiling import divisors

MIN_TENSOR_CORE_ARCH = 75  # the arch from which TVM picks its tensor-core rules (GetRuleKindFromTarget)
# The wmma groups: (accumulator, operands, compute) for f32 += f16 * f16, f16 += f16 * f16, s32 += s8 * s8 (TVM's)
# and f32 += bf16 * bf16 (registered by ``load_tensor_intrins`` from TVM's generators: TVM 0.27 has no bf16 group)
WMMA_KINDS = (("f32", "f16", "f16f16f32"), ("f16", "f16", "f16f16f16"), ("s32", "s8", "s8s8s32"),
              ("f32", "bf16", "bf16bf16f32"))


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


# Known-good blocks of a wmma design, first candidates on a GPU (as the micro-kernel seeds are on a CPU): (block rows,
# block columns, reduction step) in 16x16x16 fragments, with 2x2 warps. 8x4 (128x64, K 32) is CUTLASS's default
# float16 tile for float32 output within 48 KB of shared memory; 8x8 (the cuBLAS-like 128x128) fits only with float16
# output; 4x4 (64x64) keeps enough blocks in flight on a small matmul.
TENSOR_CORE_BLOCKS = ((8, 4, 2), (4, 8, 2), (8, 8, 1), (4, 4, 2))
WARPS = (2, 2)  # warps along rows and columns: 4 warps, 128 threads
VECTOR_LOADS = (8, 4, 2)  # elements per cooperative load, widest first (16 bytes of float16; VerifyGPUCode's limit)


def is_tensor_core_design(trace: Any) -> bool:
    return any("wmma_sync" in str(inst.attrs) or "wmma_sync" in str(inst.inputs) for inst in trace.insts
               if inst.kind.name == "Annotate")


def tensor_core_seeds(space: Any, n: int = len(TENSOR_CORE_BLOCKS)) -> list[dict[str, Any]]:
    """Up to ``n`` legal settings of the space's wmma designs (``SSSRRSRS``: spatial tilings at five levels, the
    first three bound to blockIdx.y, blockIdx.x and threadIdx.y; reductions at three), block by block of
    ``TENSOR_CORE_BLOCKS`` (each side cut down to what divides the shape), each block in every wmma design (B read
    as it is or transposed): the grid in blockIdx.x, 2x2 warps, each warp's fragments innermost, operands loaded in
    the widest vectors VerifyGPUCode takes. [] on a function without a wmma design."""
    designs = [d for d, trace in enumerate(space.designs) if is_tensor_core_design(trace)]
    out: list[dict[str, Any]] = []
    for block in TENSOR_CORE_BLOCKS:
        for design in designs:
            params = _block_params(space, design, block)
            for widest in VECTOR_LOADS if params is not None else ():  # the widest cooperative loads that pass
                for knob in space.categorical_knobs(design):
                    if is_vector_load(knob):
                        params[knob.name] = knob.choices.index(max(c for c in knob.choices if c <= widest))
                if params not in out and _legal(space, params):
                    out.append(params)
                    break
            if len(out) == n:
                return out
    return out


def _block_params(space: Any, design: int, block: tuple[int, int, int]) -> dict[str, Any] | None:
    """The design's own decisions with its tilings set to ``block`` (each side the largest divisor of the extent up to
    the block's, its warps 1 where 2 do not divide it); None for a design without the wmma tiling structure."""
    tiles = space.tile_knobs(design)
    spatial = [inst for inst, knobs in tiles.items() if knobs[0].n_levels == 5]
    reduction = [inst for inst, knobs in tiles.items() if knobs[0].n_levels == 3]
    if len(spatial) < 2 or not reduction:
        return None
    block_rows, block_cols, k_step = block
    factors = {inst: [1, 1, 1, 1] for inst in spatial}  # levels 1..4 (level 0, blockIdx.y, takes the rest)
    for inst, want, warps in ((spatial[-2], block_rows, WARPS[0]), (spatial[-1], block_cols, WARPS[1])):
        extent = tiles[inst][0].extent
        size = max(d for d in divisors(extent) if d <= want)  # ResNet-50's 14x14 = 196 rows: 13 fragments, 1
        warps = warps if size % warps == 0 else 1
        per_warp = size // warps
        inner = max(f for f in (1, 2, 4) if per_warp % f == 0)  # the innermost level holds 4 at most
        factors[inst] = [extent // size, warps, per_warp // inner, inner]
    for inst in reduction:  # the innermost reduction steps k_step fragments per shared-memory stage
        extent = tiles[inst][0].extent
        factors[inst] = [1, k_step if inst is reduction[-1] and extent % k_step == 0 else 1]
    return with_tiles(space.default_params(design), tiles, factors)


def _legal(space: Any, params: dict[str, Any]) -> bool:
    try:
        space.apply(params)
    except (InvalidConfig, RuntimeError, ValueError):  # TVM's ScheduleError is a RuntimeError
        return False
    return True
