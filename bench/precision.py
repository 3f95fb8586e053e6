"""Lower precision: each model tuned and compiled in float32, bf16 and int8 (--precision), timed beside ONNX Runtime
(float32: its CPU provider has no bf16 matmul) and PyTorch in float32 and in bfloat16 (``module.to(bfloat16)``).

    python bench/precision.py                                   # zoo:bert and zoo:resnet18, 180 s of tuning each
    python bench/precision.py --models bert --time 30 --precisions fp32,bf16 --out precision_quick

Each model is built in code with random weights (autosched.models.zoo), exported to ONNX and imported from
that file. autosched tunes it once per precision with the same wall-time budget (``tune_model``, whole process
timed, setup included) at ``--threads``. Then, in one process, the call a user makes for every contender
(numpy or torch tensors in, out), interleaved rounds, same timer, medians. Accuracy: the max relative error of
each output against ONNX Runtime's float32 on 3 random inputs and, for classifiers, how often the top-1 class
agrees with float32 over ``--agreement`` random inputs. Writes bench/results/<out>.json and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, load_now, machine_info, time_interleaved, write_json  # noqa: E402

CLASSIFIERS = {"resnet18", "mlp"}


def _tune(path: Path, db: Path, precision: str, seconds: float, threads: int) -> tuple[float, int]:
    from autosched import TuneConfig
    from autosched.api import tune_model

    start = time.perf_counter()
    config = TuneConfig(n_trials=0, n_threads=threads, time_budget_s=seconds)
    result = tune_model(str(path), "llvm", str(db), config, precision=precision)
    return time.perf_counter() - start, result.n_tasks


def bench_model(name: str, args: argparse.Namespace, work: Path) -> dict:
    import copy

    import numpy as np
    import torch

    from autosched._tvm import set_num_threads
    from autosched.api import compile as compile_model
    from autosched.models import zoo
    from autosched.models.reference import max_relative_error, onnxruntime_session

    path = zoo.export_onnx(name, work / f"{name}.onnx")
    module, (example,) = zoo.build(name)
    tuning, compiled = {}, {}
    for precision in args.precisions.split(","):
        print(f"[{name}] tuning {precision} for {args.time:.0f} s ...", flush=True)
        tuning[precision] = _tune(path, work / f"{name}_{precision}.db", precision, args.time, args.threads)
        compiled[precision] = compile_model(str(path), "llvm", str(work / f"{name}_{precision}.db"), args.threads,
                                            precision=precision)
    session = onnxruntime_session(path.read_bytes(), args.threads)
    module_bf16 = copy.deepcopy(module).to(torch.bfloat16)
    set_num_threads(args.threads)
    torch.set_num_threads(args.threads)

    rng = np.random.default_rng(args.seed)
    inputs = [rng.standard_normal(example.shape).astype(np.float32) for _ in range(3)]
    errors = {}
    for precision, model in compiled.items():
        errors[precision] = max(max_relative_error(model(x), session.run(None, {"x": x})) for x in inputs)
    with torch.no_grad():
        t32, t16 = torch.from_numpy(inputs[0]), torch.from_numpy(inputs[0]).to(torch.bfloat16)
        want = session.run(None, {"x": inputs[0]})
        errors["torch_bf16"] = max_relative_error([module_bf16(t16).float().numpy()], want)
        x = inputs[0]
        calls = {f"autosched_{p}": (lambda m=m: m(x)) for p, m in compiled.items()}
        calls.update({"onnxruntime_fp32": lambda: session.run(None, {"x": x}), "torch_fp32": lambda: module(t32),
                      "torch_bf16": lambda: module_bf16(t16)})
        times = {k: statistics.median(v) for k, v in time_interleaved(calls, args.repeat, min_round_s=0.2).items()}
    row = {"model": name, "tuning_s": {k: v[0] for k, v in tuning.items()},
           "tasks": {k: v[1] for k, v in tuning.items()}, "max_rel_error_vs_fp32": errors,
           "precision_error_on_compile": {p: m.precision_error for p, m in compiled.items() if p != "fp32"},
           "load": load_now(),
           **{f"{k}_s": v for k, v in times.items()}}
    if name in CLASSIFIERS:
        batch = [rng.standard_normal(example.shape).astype(np.float32) for _ in range(args.agreement)]
        want = [int(np.argmax(session.run(None, {"x": x})[0])) for x in batch]
        row["top1_agreement"] = {p: sum(int(np.argmax(m(x)[0])) == w for x, w in zip(batch, want, strict=True))
                                 / len(batch) for p, m in compiled.items() if p != "fp32"}
    return row


def print_table(rows: list[dict], precisions: list[str]) -> None:
    low = [p for p in precisions if p != "fp32"]
    print("\n| model | autosched fp32 ms | " + " | ".join(f"autosched {p} ms | {p} speedup" for p in low)
          + " | ONNX Runtime fp32 ms | PyTorch fp32 ms | PyTorch bf16 ms | "
          + " | ".join(f"{p} max rel. error | {p} top-1 agreement" for p in low) + " |")
    print("|---|" + "---:|" * (4 + 4 * len(low)))
    for r in rows:
        cells = [r["model"], f"{r['autosched_fp32_s'] * 1e3:.3f}"]
        cells += [c for p in low for c in (f"{r[f'autosched_{p}_s'] * 1e3:.3f}",
                                            f"{r['autosched_fp32_s'] / r[f'autosched_{p}_s']:.2f}x")]
        cells += [f"{r[k] * 1e3:.3f}" for k in ("onnxruntime_fp32_s", "torch_fp32_s", "torch_bf16_s")]
        cells += [c for p in low for c in (f"{r['max_rel_error_vs_fp32'][p]:.1e}",
                                            f"{r['top1_agreement'][p]:.1%}" if "top1_agreement" in r else "-")]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert,resnet18", help="zoo models")
    p.add_argument("--time", type=float, default=180, help="tuning seconds per model and precision")
    p.add_argument("--precisions", default="fp32,bf16,int8", help="fp32 first, then any of bf16, fp16, int8")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=7, help="interleaved timing rounds")
    p.add_argument("--agreement", type=int, default=200, help="random inputs for the top-1 agreement")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="precision")
    p.add_argument("--db-dir", help="keep the tuning databases here (default: a temporary folder)")
    args = p.parse_args()
    fair_environment(args.threads)
    work = Path(args.db_dir or tempfile.mkdtemp(prefix="autosched-precision-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = [bench_model(name, args, work) for name in args.models.split(",")]
    print_table(rows, args.precisions.split(","))
    write_json(args.out, {"machine": machine_info(), "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
