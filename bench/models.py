"""Whole-model benchmark: untuned TVM, autosched (64 trials per task), ONNX Runtime and PyTorch eager.

    python bench/models.py                      # mlp, resnet18, bert; 64 trials per task; 1 and 2 threads
    python bench/models.py --models mlp --trials 8   # a quick look

Each model is built in code with random weights (autosched.models.zoo), exported to ONNX and imported from
that file, as a user would. Tuning runs at 1 thread (the target autosched compiles for); every build is then
timed at 1 and 2 threads in this one process, peers side by side, medians of repeated samples; every
output is checked against ONNX Runtime's. Writes bench/results/models.json and prints the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, load_now, machine_info, time_callable, write_json  # noqa: E402

MODELS = ("mlp", "resnet18", "bert")


def _torch_time(module, inputs, n_threads: int, repeat: int) -> float:
    import torch

    torch.set_num_threads(n_threads)
    with torch.no_grad():
        return time_callable(lambda: module(*inputs), repeat, min_repeat_s=0.2)


def bench_model(name: str, trials: int, threads: list[int], repeat: int, work: Path) -> dict:
    import numpy as np
    import torch

    from autosched import TuneConfig, load_model, make_target, open_database
    from autosched.models import zoo
    from autosched.models.build import compile_model, compile_unscheduled
    from autosched.models.graph import extract_tasks, rewrite
    from autosched.models.reference import max_relative_error, onnxruntime_session, run_onnxruntime, time_onnxruntime
    from autosched.models.tuning import tune_model_tasks
    from autosched.session import TuningSession
    from autosched.spaces.settings import settings_for

    onnx_path = zoo.export_onnx(name, work / f"{name}.onnx")
    module, torch_inputs = zoo.build(name)
    model = load_model(str(onnx_path))
    inputs = [t.numpy() for t in torch_inputs]
    target = make_target("llvm", 1)
    fused = rewrite(model.mod, target)
    tasks = extract_tasks(fused, target, settings_for(target).version)
    db = open_database(str(work / f"{name}.db"))

    print(f"[{name}] {len(tasks)} tasks, tuning {trials} trials per task at 1 thread ...", flush=True)
    start = time.perf_counter()
    last = [0.0]

    def progress(p) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(f"  {p.n_done}/{p.n_total} trials, est. kernels {p.estimated_s * 1e3:.2f} ms "
                  f"(untuned {p.untuned_s * 1e3:.1f} ms), {p.elapsed_s:.0f} s", flush=True)

    with TuningSession(TuneConfig(n_trials=trials, n_threads=1, seed=0), tasks[0].target_json) as session:
        result = tune_model_tasks(session, tasks, db, trials, progress)
    tune_s = time.perf_counter() - start
    compile_start = time.perf_counter()
    tuned = compile_model(model, target, db, fused=fused)
    compile_s = time.perf_counter() - compile_start
    untuned = compile_unscheduled(model, target, fused=fused)

    row: dict = {"model": name, "tasks": len(tasks), "trials": result.n_new, "tune_s": tune_s,
                 "compile_s": compile_s, "sources": dict(tuned.counts()),
                 "estimated_kernels_s": result.estimated_s, "threads": {},
                 "per_task": [{"task": s.task.name, "weight": s.task.weight, "flops": s.task.flops,
                               "trials": s.n_trials, "untuned_s": s.untuned_s, "best_s": s.best_s}
                              for s in result.states]}
    session = onnxruntime_session(model, 1)
    want = run_onnxruntime(session, model, inputs)
    with torch.no_grad():
        torch_out = [module(*torch_inputs).numpy()]
    row["max_rel_error_vs_ort"] = {"autosched": max_relative_error(tuned(*inputs), want),
                                   "untuned": max_relative_error(untuned(*inputs), want),
                                   "torch": max_relative_error(torch_out, want)}
    for n in threads:
        ort = onnxruntime_session(model, n)
        times = {
            "untuned": statistics.median(untuned.time(inputs, n, repeat=3, min_repeat_ms=0)),
            "autosched": statistics.median(tuned.time(inputs, n, repeat=repeat)),
            "onnxruntime": statistics.median(time_onnxruntime(ort, model, inputs, repeat)),
            "torch": _torch_time(module, torch_inputs, n, repeat),
        }
        times["load"] = load_now()
        row["threads"][str(n)] = times
        print(f"  {n} thread(s): " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in times.items() if k != "load"),
              flush=True)
    np.testing.assert_array_less(row["max_rel_error_vs_ort"]["autosched"], 1e-3)  # a wrong model never counts
    return row


def print_table(rows: list[dict], threads: list[int]) -> list[str]:
    lines = ["| model | threads | untuned ms | autosched ms | ONNX Runtime ms | PyTorch ms | tuned vs untuned | "
             "autosched / ORT latency | max rel. err vs ORT | tasks | trials | tune s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for n in threads:
            t = r["threads"][str(n)]
            lines.append(
                f"| {r['model']} | {n} | {t['untuned'] * 1e3:.2f} | {t['autosched'] * 1e3:.3f} | "
                f"{t['onnxruntime'] * 1e3:.3f} | {t['torch'] * 1e3:.3f} | {t['untuned'] / t['autosched']:.1f}x | "
                f"{t['autosched'] / t['onnxruntime']:.2f} | {r['max_rel_error_vs_ort']['autosched']:.1e} | "
                f"{r['tasks']} | {r['trials']} | {r['tune_s']:.0f} |")
    verdicts = []
    one = [r["threads"]["1"] for r in rows if "1" in r["threads"]]
    if one:
        fast = sum(t["untuned"] / t["autosched"] >= 10 for t in one)
        verdicts.append(f"tuned >= 10x faster than untuned at 1 thread: {fast}/{len(one)} models")
        for r in rows:
            if r["model"] in ("resnet18", "bert"):
                ratio = r["threads"]["1"]["autosched"] / r["threads"]["1"]["onnxruntime"]
                verdicts.append(f"{r['model']}: autosched / ONNX Runtime latency at 1 thread {ratio:.2f} "
                                f"(target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})")
    for line in lines + verdicts:
        print(line)
    return lines + verdicts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--trials", type=int, default=64, help="trials per task (shared by the task scheduler)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", default="models")
    p.add_argument("--db-dir", help="keep the tuning databases here (default: a temporary folder)")
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    fair_environment(max(threads))
    rows = []
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        work = Path(args.db_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.models.split(","):
            rows.append(bench_model(name, args.trials, threads, args.repeat, work))
            write_json(args.out, {"machine": machine_info(), "trials_per_task": args.trials, "rows": rows})
    summary = print_table(rows, threads)
    path = write_json(args.out, {"machine": machine_info(), "trials_per_task": args.trials, "rows": rows,
                                 "summary": summary, "command": " ".join(["python", *sys.argv])})
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
