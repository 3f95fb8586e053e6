"""Where a tuned model's time goes: every kernel timed inside the model, beside its best measurement alone.

    python bench/inmodel.py --db-dir ~/corpus-work --models inception_v3,densenet121 --threads 2

Reads what ``bench/corpus.py --db-dir`` left there (``<name>.onnx``, ``<name>.db``), compiles each model with
its tuned schedules and runs it ``--runs`` times with the VM's instrument hook on: the time between the hook
before and the hook after each call (a few microseconds of hook each), summed per kernel. Beside it, the same
kernel's best record in the database (timed alone, warm, as the tuner measured it) times its calls per
inference. Then the model's whole call without the hook (median of ``--repeat`` rounds, the call a user
makes), the kernels' in-model sum, and the rest: the VM between kernels. The kernels' sum alone vs the model's
time is the gap that tuning kernels one by one cannot see. Writes bench/results/<out>.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, load_now, machine_info, time_interleaved, write_json  # noqa: E402

PREPACKED = "_prepacked"  # a kernel whose weights the build pre-packed (its layout rewrite) is named so in the VM


def kernel_times(compiled, inputs: list, runs: int) -> dict[str, tuple[int, float]]:
    """Per VM call symbol: (calls per inference, seconds per inference), from ``runs`` instrumented runs."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    started: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *args) -> int:
        now = time.perf_counter()
        if before_run:
            started[symbol] = now
        elif symbol in started:
            totals[symbol][0] += 1
            totals[symbol][1] += now - started.pop(symbol)
        return 0  # VMInstrumentReturnKind.NO_OP: run the call as it is

    vm = compiled._vm()
    compiled(*inputs)  # warm
    vm.set_instrument(instrument)
    try:
        for _ in range(runs):
            compiled(*inputs)
    finally:
        vm.set_instrument(None)
    return {symbol: (round(n / runs), seconds / runs) for symbol, (n, seconds) in totals.items()}


def alone_times(db) -> dict[str, float]:
    """Task name -> its best measured latency (seconds), as the tuner timed it alone."""
    out = {}
    for row in db.tasks():
        best = db.best(row.task_key, row.target)
        if best is not None and best.latencies_s:
            out[row.name] = best.latency_s
    return out


def profile(name: str, work: Path, threads: int, runs: int, repeat: int) -> dict:
    import autosched
    from autosched.db import open_database

    db = open_database(str(work / f"{name}.db"), create=False)
    model = autosched.load_model(str(work / f"{name}.onnx"))
    compiled = autosched.compile(model, "llvm", db, n_threads=threads)
    inputs = model.random_inputs(0)
    whole = statistics.median(time_interleaved({"model": lambda: compiled(*inputs)}, repeat, min_round_s=0.2)["model"])
    per_kernel = kernel_times(compiled, inputs, runs)
    alone = alone_times(db)
    rows = []
    for symbol, (calls, seconds) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1]):
        group = symbol.removesuffix(PREPACKED)
        rows.append({"kernel": symbol, "calls": calls, "in_model_s": seconds,
                     "source": compiled.sources.get(group, "-"),
                     "alone_s": alone[group] * calls if group in alone else None})
    in_model = sum(r["in_model_s"] for r in rows)
    matched = [r for r in rows if r["alone_s"] is not None]
    return {"model": name, "threads": threads, "model_s": whole, "kernels_in_model_s": in_model,
            "kernels_alone_s": sum(r["alone_s"] for r in matched),
            "matched_in_model_s": sum(r["in_model_s"] for r in matched), "n_kernels": len(rows),
            "n_matched": len(matched), "load": load_now(), "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db-dir", required=True, help="a bench/corpus.py --db-dir (<name>.onnx and <name>.db)")
    p.add_argument("--models", required=True, help="comma-separated names")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20, help="instrumented inferences (the per-kernel times' mean)")
    p.add_argument("--repeat", type=int, default=5, help="timing rounds of the whole call (median)")
    p.add_argument("--top", type=int, default=15, help="kernels printed per model")
    p.add_argument("--out", default="inmodel")
    args = p.parse_args()
    fair_environment(args.threads)
    from autosched._tvm import set_num_threads

    set_num_threads(args.threads)
    work = Path(args.db_dir).expanduser()
    results = []
    for name in [n for n in args.models.split(",") if n]:
        r = profile(name, work, args.threads, args.runs, args.repeat)
        results.append(r)
        print(f"\n{name}: the whole call {r['model_s'] * 1e3:.3f} ms; its {r['n_kernels']} kernels in the model "
              f"{r['kernels_in_model_s'] * 1e3:.3f} ms, the rest (the VM between them) "
              f"{(r['model_s'] - r['kernels_in_model_s']) * 1e3:.3f} ms; the {r['n_matched']} with a record: "
              f"{r['matched_in_model_s'] * 1e3:.3f} ms in the model vs {r['kernels_alone_s'] * 1e3:.3f} ms alone "
              f"({r['matched_in_model_s'] / max(r['kernels_alone_s'], 1e-12):.2f}x)")
        print("| kernel | schedule | calls | in model ms | alone ms | in model / alone |")
        print("|---|---|---:|---:|---:|---:|")
        for k in r["rows"][:args.top]:
            alone = k["alone_s"]
            print(f"| {k['kernel']} | {k['source']} | {k['calls']} | {k['in_model_s'] * 1e3:.3f} | "
                  + (f"{alone * 1e3:.3f} | {k['in_model_s'] / alone:.2f} |" if alone else "- | - |"))
    write_json(args.out, {"machine": machine_info(), "args": vars(args), "models": results})


if __name__ == "__main__":
    main()
