"""Benchmark: the single-operator workloads of the Ansor and MetaSchedule papers that TVM ships
(``create_te_workload``), tuned through ``autosched.tune`` and through MetaSchedule's ``tune_tir``.

    python bench/te_workloads.py                                              # full run: 12 workloads, 64 trials
    python bench/te_workloads.py --workloads GMM,SFM --trials 8 --seeds 1     # a quick look
    python bench/te_workloads.py --seeds 5 --runs-dir bench/results/te_runs   # 5 seeds, over several sittings

C1D, C2D, C3D (1-, 2-, 3-D convolution), GMM (batched matmul), GRP (grouped), DIL (dilated), DEP (depthwise),
T2D (transposed convolution), CAP (capsule convolution), NRM (norm), SFM (softmax), CBR (conv + bias + BN + ReLU),
each at the first shape TVM lists for it (``--index``). Both tuners get the same trials, one thread for the
measured kernels and all cores for builds. Each runs in a process of its own (this script, ``--child``), so its
wall time is the whole process: imports, worker start-up, search, builds and measurements. The best kernel of
each is then re-timed here by the same timer (autosched's runner, after a check against TVM's unscheduled
build). MetaSchedule runs with ``bench/kernels.py``'s settings: its defaults (XGBoost cost model, evolutionary
search) plus the two fixes of the TVM guide (fast ``inspect.stack`` in its builder workers, 120 s build timeout).
Prints a table and writes bench/results/te_workloads.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, load_now, machine_info, write_json  # noqa: E402

WORKLOADS = ("C1D", "C2D", "C3D", "GMM", "GRP", "DIL", "DEP", "T2D", "CAP", "NRM", "SFM", "CBR")
TUNERS = ("autosched", "ms")


def workload_task(name: str, index: int, n_threads: int):
    """The workload as an autosched task (the PrimFunc both tuners get, named ``main``)."""
    from tvm.s_tir.meta_schedule.testing.te_workload import create_te_workload

    from autosched.programs import program_task
    from autosched.tasks import make_target

    return program_task(create_te_workload(name, index), make_target("llvm", n_threads), name)


def workload_args(name: str, index: int) -> list:
    from tvm.s_tir.meta_schedule.testing.te_workload import CONFIGS

    return list(CONFIGS[name][1][index])


# --- the tuners, each in a process of its own -------------------------------------------------------------------
def child_autosched(task, args) -> dict:
    import autosched
    from autosched.config import TuneConfig

    start = time.perf_counter()
    result = autosched.tune(task.mod, task.target, db=str(Path(args.work_dir) / "autosched.db"),
                            config=TuneConfig(n_trials=args.trials, n_threads=args.threads, seed=args.seed),
                            name=task.name)
    mod = autosched.best_module(str(Path(args.work_dir) / "autosched.db"), result.task.key)
    return {"call_s": time.perf_counter() - start, "trials": result.n_new, "best_during_tuning_s":
            result.best_latency_s, "status_counts": {k.value: v for k, v in result.status_counts.items() if v},
            "mod": mod}


def child_metaschedule(task, args) -> dict:
    """``tune_tir`` as in bench/kernels.py (its defaults, plus the builder fixes of the TVM guide)."""
    from autosched._tvm import install_fast_inspect, ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    start = time.perf_counter()
    db = ms.tune_tir(
        task.mod, task.target, args.work_dir, max_trials_global=args.trials,
        num_trials_per_iter=min(32, args.trials),
        builder=ms.builder.LocalBuilder(max_workers=os.cpu_count(), timeout_sec=120, initializer=install_fast_inspect),
        runner=ms.runner.LocalRunner(timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(
            number=3, repeat=1, min_repeat_ms=100, enable_cpu_cache_flush=False)),
        cost_model="xgb", strategy="evolutionary", num_tuning_cores=os.cpu_count(), seed=args.seed)
    call_s = time.perf_counter() - start
    records = db.get_all_tuning_records()
    runs = [statistics.median(float(s) for s in r.run_secs) for r in records if r.run_secs]
    sch = ms.tir_integration.compile_tir(db, task.mod, task.target)
    return {"call_s": call_s, "trials": len(records), "best_during_tuning_s": min(runs, default=math.inf),
            "mod": sch.mod if sch is not None else None}


def run_child(args) -> None:
    """``--child TUNER``: tune one workload, write the best kernel and the numbers to ``--work-dir``."""
    from autosched._tvm import save_json

    task = workload_task(args.workload, args.index, args.threads)
    out = (child_autosched if args.child == "autosched" else child_metaschedule)(task, args)
    mod = out.pop("mod")
    if mod is not None:
        (Path(args.work_dir) / "best.json").write_text(save_json(mod))
    (Path(args.work_dir) / "result.json").write_text(json.dumps(out))


def tune_in_process(tuner: str, name: str, seed: int, args, work_dir: str) -> dict:
    """Run one tuner in a fresh process; its whole wall time, what it reported, and its best kernel."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", tuner, "--workloads", name, "--index",
           str(args.index), "--seed", str(seed), "--trials", str(args.trials), "--threads", str(args.threads),
           "--work-dir", work_dir]
    start = time.perf_counter()
    with open(Path(work_dir) / "log.txt", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    out = {"wall_s": time.perf_counter() - start}
    result, best = Path(work_dir) / "result.json", Path(work_dir) / "best.json"
    if proc.returncode != 0 or not result.exists():
        lines = (Path(work_dir) / "log.txt").read_text().strip().splitlines()
        out["error"] = f"exit {proc.returncode}: {lines[-1] if lines else ''}"
        return out
    out.update(json.loads(result.read_text()))
    out["best_json"] = best.read_text() if best.exists() else None
    return out


# --- the benchmark ------------------------------------------------------------------------------------------
def measure_mod(session, task, mod) -> float:
    """Build and time a scheduled module with autosched's runner (checked against the unscheduled build)."""
    from autosched._tvm import save_json
    from autosched.records import Candidate

    res = session.runner.run(session.builder.build([Candidate(task.key, {}, mod_json=save_json(mod))]),
                             session.prepare_io(task))[0]
    if not res.ok:
        raise RuntimeError(f"{task.name}: {res.status.value} {res.error}")
    return res.latency_s


def bench_workload(name: str, args) -> dict:
    from autosched._tvm import load_json
    from autosched.config import TuneConfig
    from autosched.session import TuningSession

    task = workload_task(name, args.index, args.threads)
    row: dict = {"workload": name, "index": args.index, "args": workload_args(name, args.index), "flops": task.flops,
                 "key": task.key, "runs": []}
    timer = TuneConfig(n_threads=args.threads, repeat=5, run_timeout_s=600, build_timeout_s=300)
    with TuningSession(timer, task.target_json) as session:
        row["untuned_s"] = session.measure_unscheduled(task).latency_s

        def new_run(seed: int) -> dict:
            run: dict = {"seed": seed, "load_before": load_now()}
            for tuner in TUNERS[:1] if args.skip_ms else TUNERS:
                with tempfile.TemporaryDirectory(prefix=f"te-{name}-{tuner}-") as work_dir:
                    out = tune_in_process(tuner, name, seed, args, work_dir)
                best_json = out.pop("best_json", None)
                run.update({f"{tuner}_{k}": v for k, v in out.items()})
                run[f"{tuner}_s"] = measure_mod(session, task, load_json(best_json)) if best_json else None
            run["load_after"] = load_now()
            return run

        row["runs"] = seed_runs(name, args, new_run, task.flops)
    for key in ("autosched_s", "ms_s", "autosched_wall_s", "ms_wall_s", "autosched_trials", "ms_trials"):
        values = [r[key] for r in row["runs"] if r.get(key)]
        row[key] = statistics.median(values) if values else None
    return row


def run_file(name: str, seed: int, args) -> Path | None:
    """Where ``--runs-dir`` keeps one seed's run of a workload (a folder per CPU: runs on other CPUs never mix)."""
    if not args.runs_dir:
        return None
    return (Path(args.runs_dir) / args.cpu /
            f"{name}.i{args.index}.t{args.threads}.n{args.trials}.s{seed}.json")


def seed_runs(name: str, args, new_run, flops: float) -> list[dict]:
    """Each seed's run of the workload: both tuners, each best kernel re-timed in this process. A run an earlier
    invocation kept in ``--runs-dir`` is read back (its commit and time say when it was made); a new one is
    kept there as soon as it ends, so a 5-seed table can be finished over several sittings."""
    runs = []
    for seed in range(args.seeds):
        path = run_file(name, seed, args)
        if path is not None and path.exists():
            run = json.loads(path.read_text())
            print(f"  {name} seed {seed}: done earlier ({run.get('commit')}, {run.get('measured_at')}): "
                  + _describe(run, flops), flush=True)
        else:
            run = {**new_run(seed), "commit": args.commit, "cpu": args.cpu,
                   "measured_at": time.strftime("%Y-%m-%d %H:%M")}
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(run))
            print(f"  {name} seed {seed}: " + _describe(run, flops), flush=True)
        runs.append(run)
    return runs


def _describe(run: dict, flops: float) -> str:
    return ", ".join(f"{tuner} {_gflops(flops, run.get(f'{tuner}_s'))} GFLOPS in {run[f'{tuner}_wall_s']:.0f} s"
                     for tuner in TUNERS if f"{tuner}_wall_s" in run)


def _gflops(flops: float, seconds: float | None) -> str:
    return f"{flops / seconds / 1e9:.1f}" if seconds else "-"


def print_table(rows: list[dict], args) -> dict:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"TVM's TE workloads (create_te_workload, index {args.index}), float32, {args.threads} "
                        f"thread(s), {args.trials} trials; GFLOPS (median of {args.seeds} seed(s)); wall s = whole "
                        "tuning process")
    for col in ("workload", "args", "MFLOP", "untuned", "autosched", "MetaSched", "as/MS", "as wall s", "MS wall s",
                "as trials", "MS trials"):
        table.add_column(col, justify="left" if col in ("workload", "args") else "right")
    f = lambda v, p=0: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    for r in rows:
        r["ratio_to_ms"] = r["ms_s"] / r["autosched_s"] if r.get("ms_s") and r.get("autosched_s") else None
        table.add_row(r["workload"], ",".join(map(str, r["args"])), f(r["flops"] / 1e6, 1),
                      _gflops(r["flops"], r["untuned_s"]), _gflops(r["flops"], r["autosched_s"]),
                      _gflops(r["flops"], r["ms_s"]), f(r["ratio_to_ms"], 2), f(r["autosched_wall_s"]),
                      f(r["ms_wall_s"]), f(r["autosched_trials"]), f(r["ms_trials"]))
    Console(width=200).print(table)
    compared = [r for r in rows if r.get("ratio_to_ms")]
    if not compared:
        return {}
    summary = {
        "n_workloads": len(rows), "n_compared": len(compared),
        "n_autosched_ge_ms": sum(r["ratio_to_ms"] >= 1 for r in compared),
        "n_autosched_ge_0.8x_ms": sum(r["ratio_to_ms"] >= 0.8 for r in compared),
        "geomean_speed_ratio_autosched_to_ms": math.exp(statistics.mean(math.log(r["ratio_to_ms"]) for r in compared)),
        "total_wall_s_autosched": sum(r["autosched_wall_s"] for r in compared),
        "total_wall_s_ms": sum(r["ms_wall_s"] for r in compared),
    }
    print(f"autosched >= MetaSchedule on {summary['n_autosched_ge_ms']}/{len(compared)} workloads (>= 0.8x on "
          f"{summary['n_autosched_ge_0.8x_ms']}); geometric mean speed ratio "
          f"{summary['geomean_speed_ratio_autosched_to_ms']:.2f}x; tuning wall time "
          f"{summary['total_wall_s_autosched']:.0f} s vs {summary['total_wall_s_ms']:.0f} s")
    return summary


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {','.join(WORKLOADS)}")
    p.add_argument("--index", type=int, default=0, help="which of TVM's shapes for each workload (0-3)")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seeds", type=int, default=1, help="seeds per workload (median reported)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-ms", action="store_true", help="leave MetaSchedule out (quick runs)")
    p.add_argument("--out", default="te_workloads")
    p.add_argument("--runs-dir", help="keep each seed's finished run here (e.g. bench/results/te_runs, committed), in "
                   "a folder named after this CPU, and read back the runs kept there instead of tuning them again")
    p.add_argument("--child", choices=TUNERS, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.workload_list = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(args.workload_list) - set(WORKLOADS))
    if unknown:
        p.error(f"unknown workloads {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    if args.runs_dir and args.skip_ms:
        p.error("--skip-ms runs leave MetaSchedule out: keep them out of --runs-dir")
    if args.child:
        args.workload = args.workload_list[0]
    return args


def main() -> None:
    args = parse_args()
    fair_environment(args.threads)
    logging.basicConfig(level=logging.WARNING)
    if args.child:
        run_child(args)
        return
    from threadpoolctl import threadpool_limits

    info = machine_info()
    args.cpu, args.commit = info["cpu"], git_commit()
    print(f"machine: {info}", flush=True)
    rows: list[dict] = []
    saved = {k: v for k, v in vars(args).items() if k not in ("child", "seed", "work_dir", "workload_list", "cpu",
                                                               "commit")}
    with threadpool_limits(args.threads):
        for name in args.workload_list:
            rows.append(bench_workload(name, args))
            write_json(args.out, {"machine": info, "args": saved, "rows": rows})
        summary = print_table(rows, args)
    commits = sorted({run.get("commit", "?") for row in rows for run in row["runs"]})
    path = write_json(args.out, {"machine": info, "args": saved, "rows": rows, "summary": summary,
                                 "commits": commits})
    print(f"runs made at {', '.join(commits)}; wrote {path}")


if __name__ == "__main__":
    main()
