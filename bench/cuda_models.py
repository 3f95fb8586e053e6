"""Benchmark (no GPU needed): every corpus model compiled for a CUDA architecture, each group's schedule accounted for.

    python bench/cuda_models.py                                  # every corpus model, full size, sm_90
    python bench/cuda_models.py --size small --models resnet50,bert --archs sm_80,sm_90   # a quick look

Each model of the corpus (autosched/corpus/catalog.py: torchvision, timm, Hugging Face configs, recurrent nets;
random weights) is imported through its ONNX export (through PyTorch where TVM's ONNX importer cannot read it),
rewritten and fused as for tuning, and compiled with ``autosched.compile`` for the architecture with no tuning
database: every fusion group gets dlight's schedule, else the search space's default, else it is left unscheduled
(a GPU build then fails, and the row says which group). The CUDA source of the whole model is then compiled by nvcc
for that architecture. Per model: the groups and where each schedule came from, whether the build and nvcc
succeeded, and the seconds each took. Prints a table and writes bench/results/cuda_models.json. What it shows: a
user's model compiles for the GPU before anything is tuned, and what a group the search never reaches runs (dlight's
schedule).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import git_commit, write_json  # noqa: E402

KERNEL = re.compile(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(")


@dataclass
class Row:
    model: str
    arch: str
    path: str = "onnx"  # how it was imported: its ONNX export, or "torch" where TVM's ONNX importer cannot read it
    groups: int = 0
    sources: dict[str, int] = field(default_factory=dict)  # dlight / default / unscheduled -> groups
    kernels: int = 0
    build_ok: bool = False
    nvcc_ok: bool | None = None  # None: nvcc not tried (the build failed, or --no-nvcc)
    import_s: float = 0.0
    build_s: float = 0.0
    nvcc_s: float = 0.0
    error: str | None = None


def cuda_source(compiled) -> str:
    """The CUDA C of a compiled model (its host module imports the device module)."""
    host = compiled.executable.mod.imports
    return "\n".join(m.inspect_source("cuda") for h in host for m in h.imports if m.kind == "cuda")


def nvcc(source: str, arch: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="cuda-models-") as tmp:
        path = Path(tmp) / "model.cu"
        path.write_text(source)
        done = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-o", str(path.with_suffix(".cubin")), str(path)],
                              capture_output=True, text=True)
        return done.returncode == 0, done.stderr.strip().splitlines()[-1][:200] if done.returncode else ""


def load(name: str, size: str, row: Row):
    """The model through its ONNX export (``corpus:NAME``), as bench/corpus.py imports it; through the PyTorch path
    where TVM's ONNX importer cannot read it (LSTM, GRU)."""
    import autosched
    from autosched.corpus.catalog import build_module
    from autosched.errors import AutoschedError

    try:
        return autosched.load_model(f"corpus:{name}@{size}")
    except AutoschedError:
        row.path = "torch"
        module, inputs = build_module(name, size)
        return autosched.load_model(module, example_inputs=inputs, name=name)


def compile_model(name: str, arch: str, size: str, run_nvcc: bool) -> Row:
    import autosched
    from autosched.targets import make_target

    row, start = Row(name, arch), time.perf_counter()
    try:
        model = load(name, size, row)
        row.import_s = time.perf_counter() - start
        start = time.perf_counter()
        compiled = autosched.compile(model, target=make_target(arch))
        row.build_s, row.build_ok = time.perf_counter() - start, True
    except Exception as err:  # noqa: BLE001 - the row says why
        row.build_s = time.perf_counter() - start
        row.error = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:200] if str(err).strip() else ''}"
        return row
    row.groups, row.sources = len(compiled.sources), dict(Counter(compiled.sources.values()))
    source = cuda_source(compiled)
    row.kernels = len(set(KERNEL.findall(source)))
    if run_nvcc:
        start = time.perf_counter()
        row.nvcc_ok, why = nvcc(source, arch)
        row.nvcc_s = time.perf_counter() - start
        row.error = f"nvcc: {why}" if why else None
    return row


def main(argv: list[str] | None = None) -> int:
    from autosched.corpus.catalog import CORPUS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="sm_90", help="CUDA architectures, comma-separated")
    parser.add_argument("--models", default=",".join(CORPUS), help="corpus models, comma-separated")
    parser.add_argument("--size", default="full", choices=("small", "full"), help="the corpus models' size")
    parser.add_argument("--no-nvcc", action="store_true", help="skip nvcc (TVM's code generation only)")
    parser.add_argument("--out", default="cuda_models", help="name of the JSON written under bench/results/")
    args = parser.parse_args(argv)
    from autosched.targets import use_nvcc_without_nvrtc

    use_nvcc_without_nvrtc()
    rows = []
    for arch in args.archs.split(","):
        for name in args.models.split(","):
            rows.append(compile_model(name, arch, args.size, not args.no_nvcc))
            r = rows[-1]
            print(f"{arch:6s} {name:26s} groups {r.groups:3d} {r.sources}  kernels {r.kernels:3d}  build "
                  f"{'ok' if r.build_ok else 'FAILED'} ({r.build_s:.0f} s)  nvcc {r.nvcc_ok} ({r.nvcc_s:.0f} s)"
                  + (f"  {r.error}" if r.error else ""), flush=True)
    ok = [r for r in rows if r.build_ok and r.nvcc_ok is not False]
    print(f"{len(ok)} of {len(rows)} builds compiled; groups: "
          f"{dict(sum((Counter(r.sources) for r in rows), Counter()))}")
    path = write_json(args.out, {"command": "python bench/cuda_models.py " + " ".join(argv or sys.argv[1:]),
                                 "commit": git_commit(), "size": args.size, "rows": [asdict(r) for r in rows]})
    print(f"wrote {path}")
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
