"""Benchmark: does the cost model make measurements pay? Best latency against measured trials for
(a) search without a model (256 trials), (b) the online XGBoost model, (c) the shipped cross-task model as
start, (d) MetaSchedule (64 trials each for b-d); plus the shipped model's pairwise accuracy on shapes it
was not trained on.

    python bench/cost_model.py                                # full run (1 thread, ~40-45 min)
    python bench/cost_model.py --workloads matmul --seeds 1 --long 64 --skip-ms   # quick look
    python bench/cost_model.py --workloads softmax,layer_norm --seeds 3 --name cost_model_seeds

Prints a table, writes bench/results/cost_model.json and bench/results/cost_model.png (``--name`` renames
both). The verdicts compare kernels: each method's best kernel (and (a)'s best after 64 trials) is timed
again at the end of each seed, side by side and interleaved, so that a longer search's luckier minimum over
noisy measurements does not count as a better kernel. The curves and the trials-to-95% column are the
measurements made while tuning.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, fair_environment, machine_info, write_json  # noqa: E402
from kernels import SHAPES, measure_mod, run_metaschedule  # noqa: E402

METHODS = {"a": "no model", "b": "online model", "c": "shipped model", "d": "MetaSchedule"}


def best_so_far(latencies: list[float]) -> list[float]:
    out, best = [], float("inf")
    for lat in latencies:
        best = min(best, lat)
        out.append(best)
    return out


def autosched_run(task, session, cfg, short: int):
    """Tune; return the curve, and the best kernels after ``short`` trials and after all of them."""
    from autosched.apply import schedule_from_record
    from autosched.db import MemoryDatabase
    from autosched.records import Status

    db = MemoryDatabase()
    session.config = cfg
    result = session.tune(task, db)
    recs = [r for r in db.records(task.key) if r.status is not Status.INVALID]
    curve = best_so_far([r.latency_s for r in recs])
    best_short = min((r for r in recs[:short] if r.status is Status.OK), key=lambda r: r.latency_s)
    kernels = {"short": schedule_from_record(task.mod, best_short).mod,
               "long": schedule_from_record(task.mod, result.best).mod}
    return {"curve": curve, "tune_s": result.elapsed_s, "records": recs, "kernels": kernels}


def metaschedule_run(task, n_trials: int, seed: int):
    mod, wall, _, lat = run_metaschedule(task, n_trials, seed, return_curve=True)
    return {"curve": best_so_far(lat), "tune_s": wall, "kernels": {"short": mod} if mod is not None else {}}


def remeasure_side_by_side(session, task, run: dict, rounds: int = 5) -> None:
    """Time every method's best kernel again, interleaved round by round in this one process, and store
    the median as ``final_s`` (``a`` also gets ``final_short_s``: its best after the short budget). Equal
    kernels (the same program found by two methods) are timed once and share the result.

    Best-so-far during tuning is a minimum over noisy measurements, and a longer run takes the minimum
    over more of them; measuring the chosen kernels side by side compares the kernels, not the luck."""
    from autosched._tvm import structural_hash

    kernels = [(k, which, mod) for k in METHODS if k in run for which, mod in run[k].pop("kernels", {}).items()]
    # methods that found the very same program share its timings (a one-point space is not a contest)
    hashes = {(k, which): structural_hash(mod) for k, which, mod in kernels}
    unique = {hashes[(k, which)]: mod for k, which, mod in kernels}
    samples: dict[int, list[float]] = {h: [] for h in unique}
    for _ in range(rounds):
        for h, mod in unique.items():
            samples[h].append(measure_mod(session, task, mod, repeat=3))
    for (k, which), h in hashes.items():
        key = "final_s" if (which == "long" or k != "a") else "final_short_s"
        run[k][key] = statistics.median(samples[h])
        run[k][key.removesuffix("_s") + "_samples_s"] = samples[h]  # the rounds, to judge how close a tie is
    run["distinct_kernels"] = len(unique)


def shipped_accuracy(task, space_records, model) -> float:
    """Pairwise accuracy of ``model`` on a task's measured candidates (from run a)."""
    from autosched.apply import schedule_from_record
    from autosched.cost.features import FeatureExtractor
    from autosched.cost.training import pairwise_accuracy
    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace

    space = TraceSearchSpace(task.mod, task.target, settings_for(task.target))
    extractor = FeatureExtractor(space.context)
    ok = [r for r in space_records if np.isfinite(r.latency_s)]
    X = extractor([schedule_from_record(task.mod, r) for r in ok])
    lat = np.array([r.latency_s for r in ok])
    return pairwise_accuracy(model.predict(X), lat.min() / lat, np.zeros(len(ok)))


def bench_workload(op: str, seeds: list[int], args, shipped) -> dict:
    from autosched.config import TuneConfig
    from autosched.session import TuningSession
    from autosched.spaces.settings import settings_for
    from autosched.tasks import make_target, op_task

    target = make_target("llvm", args.threads)
    task = op_task(op, SHAPES[op], target, settings_for(target).version)
    row = {"workload": op, "shape": list(SHAPES[op]), "flops": task.flops, "runs": []}
    base = TuneConfig(n_threads=args.threads)
    configs = {"a": base.replace(cost_model="none", n_trials=args.long),
               "b": base.replace(cost_model="xgb", transfer=False, n_trials=args.trials),
               "c": base.replace(cost_model="xgb", transfer=True, n_trials=args.trials)}
    with TuningSession(base, task.target_json) as session:
        for seed in seeds:
            run = {"seed": seed}
            for key, cfg in configs.items():
                res = autosched_run(task, session, cfg.replace(seed=seed), args.trials)
                if key == "a" and shipped is not None:
                    run["shipped_pairwise_accuracy"] = shipped_accuracy(task, res["records"], shipped)
                res.pop("records")
                if key != "a":
                    res["kernels"].pop("long")  # the same kernel: b and c ran exactly the short budget
                run[key] = res
            if not args.skip_ms:
                run["d"] = metaschedule_run(task, args.trials, seed)
            remeasure_side_by_side(session, task, run)
            row["runs"].append(run)
            print(f"  {op} seed {seed}: " + ", ".join(
                f"{METHODS[k]} {task.flops / run[k]['final_s'] / 1e9:.1f} GFLOPS"
                for k in METHODS if k in run and run[k].get("final_s")), flush=True)
    return row


def _at(curves: list[list[float]], n: int) -> float:
    """Median over seeds of the best latency after ``n`` trials (or all, if a run had fewer)."""
    return statistics.median(c[min(n, len(c)) - 1] for c in curves)


def _gflops(flops: float, seconds: float | None) -> str:
    return f"{flops / seconds / 1e9:.1f}" if seconds and np.isfinite(seconds) else "-"


def summarise(rows: list[dict], args) -> dict:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Cost model, {args.threads} thread(s): GFLOPS (median of seeds) and trials to reach 95% "
                        "of the best any method found")
    n = args.trials
    for c in ["workload", f"a@{n}", f"a@{args.long}", f"b@{n}", f"c@{n}", f"MS@{n}", "trials95 a/b/c/MS",
              f"re-measured a@{n}/a@{args.long}/b/c/MS", f"b|c@{n} >= a@{args.long}", f"as@{n} >= MS",
              "seeds as >= MS", "shipped acc."]:
        table.add_column(c)
    n_model_wins = n_ms_wins = 0
    accs = []
    for r in rows:
        med = {}
        for k in METHODS:
            curves = [run[k]["curve"] for run in r["runs"] if k in run]
            if not curves:
                continue
            med[k] = {"at64": _at(curves, args.trials), "atlong": _at(curves, args.long),
                      "final": statistics.median(run[k]["final_s"] for run in r["runs"] if run[k].get("final_s"))}
            if k == "a":
                med[k]["final_short"] = statistics.median(run[k]["final_short_s"] for run in r["runs"])
        best_any = min(v["atlong"] for v in med.values())
        t95 = {}
        for k in med:
            per_seed = []
            for run in r["runs"]:
                c = run[k]["curve"]
                hit = next((i + 1 for i, v in enumerate(c) if v <= best_any / 0.95), None)
                per_seed.append(hit if hit else float("inf"))
            t95[k] = statistics.median(per_seed)
        model_final = min(med["b"]["final"], med["c"]["final"])  # re-measured side by side
        model_win = model_final <= med["a"]["final"]
        ms_win = "d" in med and model_final <= med["d"]["final"]
        # the same comparison seed by seed (kernels of one seed are re-measured side by side)
        inf = float("inf")
        seed_wins = [min(run["b"].get("final_s") or inf, run["c"].get("final_s") or inf) <= run["d"]["final_s"]
                     for run in r["runs"] if "d" in run and run["d"].get("final_s")]
        n_model_wins += model_win
        n_ms_wins += bool(ms_win)
        acc = [run["shipped_pairwise_accuracy"] for run in r["runs"] if "shipped_pairwise_accuracy" in run]
        accs += acc
        r.update(summary={"median": med, "trials_to_95": t95, "model64_ge_a_long": model_win, "as64_ge_ms": ms_win,
                          "seeds_as64_ge_ms": f"{sum(seed_wins)}/{len(seed_wins)}",
                          "shipped_pairwise_accuracy": statistics.median(acc) if acc else None})
        g = partial(_gflops, r["flops"])
        fmt = lambda v: "-" if v == float("inf") else f"{v:.0f}"
        table.add_row(r["workload"], g(med["a"]["at64"]), g(med["a"]["atlong"]), g(med["b"]["at64"]),
                      g(med["c"]["at64"]), g(med.get("d", {}).get("at64")),
                      "/".join(fmt(t95.get(k, float("inf"))) for k in METHODS),
                      "/".join(g(v) for v in [med["a"]["final_short"], med["a"]["final"], med["b"]["final"],
                                              med["c"]["final"], med.get("d", {}).get("final")]),
                      "yes" if model_win else "no", "yes" if ms_win else ("-" if "d" not in med else "no"),
                      f"{sum(seed_wins)}/{len(seed_wins)}" if seed_wins else "-",
                      f"{statistics.median(acc):.3f}" if acc else "-")
    Console(width=220).print(table)
    summary = {"n_model64_ge_a_long": n_model_wins, "n_as64_ge_ms": n_ms_wins, "n_workloads": len(rows),
               "shipped_pairwise_accuracy_median": statistics.median(accs) if accs else None}
    print(f"(b) or (c) at {args.trials} >= (a) at {args.long} (best kernels re-measured side by side): "
          f"{n_model_wins}/{len(rows)} (target >= 6/8); "
          f"autosched at {args.trials} >= MetaSchedule (re-measured): {n_ms_wins}/{len(rows)} (target: all); "
          f"shipped model pairwise accuracy on unseen shapes: median "
          f"{summary['shipped_pairwise_accuracy_median'] or float('nan'):.3f} (target >= 0.75)")
    return summary


def plot(rows: list[dict], args) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, (len(rows) + 1) // 2, figsize=(4.2 * ((len(rows) + 1) // 2), 7), squeeze=False)
    for ax, r in zip(axes.flat, rows, strict=False):
        for k, style in zip(METHODS, ["-", "-", "-", "--"], strict=True):
            curves = [run[k]["curve"] for run in r["runs"] if k in run]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            med = np.median([c[:n] for c in curves], axis=0)
            ax.plot(np.arange(1, n + 1), r["flops"] / med / 1e9, style, label=METHODS[k],
                    marker="o" if n == 1 else None)
        ax.set_title(f"{r['workload']} {'x'.join(map(str, r['shape']))}", fontsize=9)
        ax.set_xlabel("measured trials")
        ax.set_ylabel("best GFLOPS")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS / f"{args.name}.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(SHAPES))
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--long", type=int, default=256, help="trials of the no-model search")
    p.add_argument("--seeds", type=int, default=5, help="runs per workload and method (medians reported)")
    p.add_argument("--name", default="cost_model", help="name of the results files under bench/results")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-ms", action="store_true")
    args = p.parse_args()
    fair_environment(args.threads)
    from autosched.session import load_start_model

    shipped = load_start_model("", "llvm")
    info = machine_info()
    print(f"machine: {info}; shipped model: {getattr(shipped, 'meta_', {}).get('command')}", flush=True)
    rows = []
    for op in args.workloads.split(","):
        seeds = list(range(args.seeds))
        rows.append(bench_workload(op, seeds, args, shipped))
        write_json(args.name, {"machine": info, "args": vars(args), "rows": rows})
    summary = summarise(rows, args)
    png = plot(rows, args)
    path = write_json(args.name, {"machine": info, "args": vars(args), "rows": rows, "summary": summary})
    print(f"wrote {path} and {png}")


if __name__ == "__main__":
    main()
