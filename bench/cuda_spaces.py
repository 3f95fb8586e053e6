"""Benchmark (no GPU needed): how much of each CUDA search space is legal, and whether what it builds compiles.

    python bench/cuda_spaces.py                              # sm_80 and sm_90, 100 samples per operator
    python bench/cuda_spaces.py --archs sm_90 --samples 20   # a quick look

For each catalog operator (and float16 / bfloat16 matmuls and a float16 convolution, where the tensor-core designs
apply) on each architecture: the space's designs (and how many are tensor-core ones), the share of settings drawn
uniformly from the rules' designs that are legal as drawn (VerifyGPUCode and the other postprocessors accept them:
threads per block, virtual threads, shared memory), the share legal after ``TraceSearchSpace.repair`` (what the
search measures), the time per sample, and whether the space's default schedule (dlight's design), a legal setting
of each tensor-core design and each known-good tensor-core block (``tensor_core_seeds``) build with nvcc for that
architecture. Prints a table and writes bench/results/cuda_spaces.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import git_commit, write_json  # noqa: E402

SHAPES = {"matmul": (1024, 1024, 1024), "batch_matmul": (12, 128, 128, 64), "dense": (128, 3072, 768),
          "conv2d": (1, 64, 56, 56, 64, 3, 3), "depthwise_conv2d": (1, 32, 112, 112, 3, 3), "softmax": (128, 768),
          "layer_norm": (128, 768), "elementwise": (128, 3072), "gelu": (128, 3072)}
FP16_MATMUL = (1024, 1024, 1024)  # float16 in and out: MultiLevelTilingTensorCore applies
# float16 and bfloat16 kernels (bench/gpu_check.py's): tensor-core designs
LOW_PRECISION = {
    "matmul_fp16": lambda gc, target: gc.matmul_fp16_task(*FP16_MATMUL, target),
    "matmul_fp16_f32acc": lambda gc, target: gc.matmul_fp16_f32acc_task(*FP16_MATMUL, target),
    "matmul_bf16": lambda gc, target: gc.lowp_matmul_task("bfloat16", *FP16_MATMUL, target),
    "conv2d_fp16": lambda gc, target: gc.conv2d_fp16_task((1, 256, 14, 14, 256, 3, 3), target),
}


@dataclass
class Row:
    op: str
    arch: str
    designs: int = 0
    tensor_core_designs: int = 0
    samples: int = 0
    valid_drawn: float = 0.0  # share legal as drawn
    valid_repaired: float = 0.0  # share legal as drawn or after repair
    ms_per_sample: float = 0.0
    default_builds: bool | None = None  # the default schedule compiles with nvcc (None: not tried)
    tensor_core_builds: list[bool] = field(default_factory=list)  # per tensor-core design: a legal setting compiles
    dlight_builds: bool | None = None  # the dlight design (the GPU default, no knobs) is legal and compiles
    tensor_core_seeds: int = 0  # known-good tensor-core blocks legal in this space (spaces/tensor_core.py)
    seeds_build: list[bool] = field(default_factory=list)  # each seed compiles
    errors: list[str] = field(default_factory=list)


def builds(mod, target) -> tuple[bool, str]:
    from autosched._tvm import tvm

    try:
        tvm.compile(mod, target=target)
        return True, ""
    except Exception as err:  # noqa: BLE001 - the row records why
        return False, f"{type(err).__name__}: {str(err).splitlines()[-1][:160] if str(err) else ''}"


def measure(op: str, task, arch: str, samples: int, build: bool) -> Row:
    from autosched.errors import InvalidConfig
    from autosched.search.pool import uniform_params
    from autosched.spaces.settings import settings_for
    from autosched.spaces.tensor_core import is_tensor_core_design
    from autosched.spaces.trace_space import TraceSearchSpace

    target = task.target
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=0)
    row = Row(op, arch, len(space.designs), sum(is_tensor_core_design(t) for t in space.designs), samples)
    rng, drawn_ok, repaired_ok = np.random.default_rng(0), 0, 0
    start = time.perf_counter()
    legal: dict[int, dict] = {}  # design -> a legal setting of it
    dlight = space.design_index("dlight")
    for i in range(samples):
        params = uniform_params(space, rng)
        while dlight is not None and params.get("design") == dlight:  # the rules' designs (dlight's: one point)
            params = uniform_params(space, rng)
        try:
            space.apply(params)
            drawn_ok += 1
            legal.setdefault(int(params.get("design", 0)), params)
        except (InvalidConfig, RuntimeError, ValueError):
            fixed = space.repair(params, seed=i)
            if fixed is not None:
                repaired_ok += 1
                legal.setdefault(int(fixed[0].get("design", 0)), fixed[0])
    row.ms_per_sample = (time.perf_counter() - start) / max(samples, 1) * 1e3
    row.valid_drawn, row.valid_repaired = drawn_ok / max(samples, 1), (drawn_ok + repaired_ok) / max(samples, 1)
    if build:
        found = space.default_schedule()
        if found is not None:
            row.default_builds, why = builds(found[1].mod, target)
            row.errors += [f"default: {why}"] if why else []
        for design, trace in enumerate(space.designs):
            if not is_tensor_core_design(trace):
                continue
            if design not in legal:
                row.tensor_core_builds.append(False)
                row.errors.append(f"design {design}: no legal setting among the samples")
                continue
            ok, why = builds(space.apply(legal[design]).mod, target)
            row.tensor_core_builds.append(ok)
            row.errors += [f"design {design}: {why}"] if why else []
        if dlight is not None:
            row.dlight_builds, why = builds(space.apply({"design": dlight}).mod, target)
            row.errors += [f"dlight: {why}"] if why else []
        from autosched.spaces.tensor_core import tensor_core_seeds

        seeds = tensor_core_seeds(space)
        row.tensor_core_seeds = len(seeds)
        for params in seeds:
            ok, why = builds(space.apply(params).mod, target)
            row.seeds_build.append(ok)
            row.errors += [f"seed {params}: {why}"] if why else []
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="sm_80,sm_90", help="CUDA architectures, comma-separated")
    parser.add_argument("--samples", type=int, default=100, help="settings drawn per operator and architecture")
    parser.add_argument("--ops", default=",".join(SHAPES) + "," + ",".join(LOW_PRECISION),
                        help="operators, comma-separated")
    parser.add_argument("--no-build", action="store_true", help="skip the nvcc builds")
    parser.add_argument("--out", default="cuda_spaces", help="name of the JSON written under bench/results/")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    from autosched.spaces.settings import settings_for
    from autosched.targets import use_nvcc_without_nvrtc
    from autosched.tasks import make_target, op_task

    use_nvcc_without_nvrtc()
    import gpu_check

    rows = []
    for arch in args.archs.split(","):
        target = make_target(arch)
        for op in args.ops.split(","):
            if op in LOW_PRECISION:
                task = LOW_PRECISION[op](gpu_check, target)
            else:
                task = op_task(op, SHAPES[op], target, settings_for(target).version)
            rows.append(measure(op, task, arch, args.samples, not args.no_build))
            r = rows[-1]
            print(f"{arch:6s} {op:17s} designs {r.designs} (tensor core {r.tensor_core_designs})  legal as drawn "
                  f"{r.valid_drawn:4.0%}  after repair {r.valid_repaired:4.0%}  {r.ms_per_sample:5.0f} ms/sample  "
                  f"default builds {r.default_builds}  tensor-core designs build {r.tensor_core_builds}  dlight builds "
                  f"{r.dlight_builds}  seeds {r.tensor_core_seeds} build {r.seeds_build}", flush=True)
    path = write_json(args.out, {"command": "python bench/cuda_spaces.py " + " ".join(argv or sys.argv[1:]),
                                 "commit": git_commit(), "samples": args.samples, "rows": [asdict(r) for r in rows]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
