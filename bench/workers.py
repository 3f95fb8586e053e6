"""Benchmark: one model tuned by one worker vs several workers sharing one database, all measuring on the same
TVM RPC devices (a tracker and servers on 127.0.0.1).

    python bench/workers.py                              # zoo:mlp, 64 trials per task, 1 worker vs 3, 2 servers
    python bench/workers.py --trials 8                   # a quick look

Variant A is one ``autosched tune MODEL --rpc ... --key ... --db A.db`` process; variant B is ``--workers`` copies
of the same command started together on one fresh B.db (README, "Many workers, one study"). The budget is the
database's (``--trials`` per task, baselines included, counted over every worker's records), so both variants spend
the same number of measurements. Wall time is that of the whole processes (imports, model import, builds,
measurements): A's one process, B's from the first start to the last exit; CPU s is the tuning processes' CPU time
plus the RPC servers'. The servers run on this machine's cores, as the workers' builds do, so on 2 cores B has no
cores of its own to gain; it can still end sooner, as one worker's steps (ask, build, measure) run one after another
and leave the cores idle part of the time, which the others' steps fill (and other users of the machine move the
numbers). The point is that the split is correct. From each database it then counts: tasks, measurements (OK and
failed, not rejected), each worker's measurements (the Optuna trials carry their tuner's ``owner`` = [host, pid,
start time]; the records do not say who measured them), the hand-overs of a task from one worker to another, pairs
of trials of two workers on one task that overlap in time (none allowed: a task is claimed), schedules measured
twice (none allowed), claims left behind, and the best estimated model latency (sum over tasks of weight x best
latency).
Prints a table and writes bench/results/workers.json and workers.log (the table and the per-task split).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, fair_environment, load_now, machine_info, write_json  # noqa: E402

from autosched.testing.rpc import LoopbackCluster  # noqa: E402

KEY = "bench-workers"
AUTOSCHED = Path(sys.executable).parent / "autosched"  # the console script: its pid is the tuner's own


# --- the RPC tracker and servers ------------------------------------------------------------------------------
class Cluster(LoopbackCluster):
    """The tracker and ``n_servers`` servers under ``KEY`` on 127.0.0.1 (as in tests/measure/test_rpc.py), and the
    CPU time the servers spent measuring."""

    def __init__(self, n_servers: int, log_dir: Path):
        super().__init__(n_servers, log_dir, KEY)

    def server_cpu_s(self) -> float:
        """CPU seconds of the servers so far (their forked session processes included, once they have ended)."""
        import psutil

        total = 0.0
        for proc in self.servers:
            try:
                root = psutil.Process(proc.pid)
                for p in [root, *root.children(recursive=True)]:
                    t = p.cpu_times()
                    total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return total


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its group: the process and the children it forked
        except ProcessLookupError:
            pass
        proc.wait()


# --- the tuning processes ------------------------------------------------------------------------------------
def tune_argv(args, db: Path, cluster: Cluster, log: Path) -> list[str]:
    argv = [str(AUTOSCHED), "--log", str(log), "tune", args.model, "--threads", "1", "--rpc", cluster.address,
            "--key", KEY, "--trials", str(args.trials), "--seed", str(args.seed), "--cost-model", args.cost_model,
            "--json", "--db", str(db)]
    return argv + (["--batch", str(args.batch)] if args.batch else [])


def run_workers(args, n_workers: int, db: Path, cluster: Cluster, work_dir: Path, name: str) -> dict:
    """``n_workers`` copies of the same command started together; the whole wall time (first start to last exit),
    each one's exit time, pid and result event."""
    procs: list[subprocess.Popen] = []
    exits: dict[int, tuple[float, str, str]] = {}

    def wait(i: int, proc: subprocess.Popen) -> None:
        out, err = proc.communicate()
        exits[i] = (time.perf_counter(), out, err)

    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)  # the servers are not waited for: the workers' CPU only
    start, start_unix = time.perf_counter(), time.time()
    threads = []
    try:
        for i in range(n_workers):
            argv = tune_argv(args, db, cluster, work_dir / f"{name}-w{i}.log")
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True, env={**os.environ, "NO_COLOR": "1"}))
            threads.append(threading.Thread(target=wait, args=(i, procs[-1]), daemon=True))
            threads[-1].start()
        for t in threads:
            t.join(timeout=args.timeout_s)
        if any(t.is_alive() for t in threads):
            raise RuntimeError(f"variant {name}: a worker still runs after {args.timeout_s} s")
    finally:
        for proc in procs:
            _kill_group(proc)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers = []
    for i, proc in enumerate(procs):
        ended, out, err = exits[i]
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        result = next((e for e in events if e.get("event") == "result"), None)
        worker = {"worker": i, "pid": proc.pid, "returncode": proc.returncode, "wall_s": ended - start,
                  "result": result}
        if proc.returncode != 0 or result is None:
            worker["error"] = err.strip().splitlines()[-5:]
        log = work_dir / f"{name}-w{i}.log"  # the library's log: a round that found nothing new says so
        text = log.read_text(errors="replace") if log.exists() else ""
        worker["exhausted"] = re.findall(r"INFO autosched.tune: (\S+): search space exhausted after (\d+) trials", text)
        workers.append(worker)
    return {"wall_s": max(w["wall_s"] for w in workers), "start_unix": start_unix, "workers": workers,
            "tuner_cpu_s": after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime,
            "argv": tune_argv(args, db, cluster, work_dir / f"{name}-wN.log")}


# --- what the database says ----------------------------------------------------------------------------------
def _ts(d: datetime.datetime | None) -> float | None:
    return d.timestamp() if d is not None else None  # Optuna stores local naive times: timestamp() reads them so


def analyse(db_path: Path, run: dict, args) -> dict:
    """Counts, the per-worker split and the checks, from the records, the Optuna studies and the claims."""
    from autosched.db import open_database
    from autosched.records import Status, schedule_key
    from autosched.search.optuna_strategy import OWNER_ATTR, STATUS_ATTR, TIMING_ATTR
    from autosched.search.study import load_task_study
    from autosched.tune import BASELINE_DECISIONS

    worker_of = {w["pid"]: w["worker"] for w in run["workers"]}
    t0 = run["start_unix"]
    db = open_database(str(db_path), create=False)
    out: dict = {"tasks": [], "per_worker_trials": Counter(), "overlaps": [], "duplicates": 0, "unfinished": 0,
                 "foreign_owners": 0}
    first: dict = {}  # worker -> start of its first measured trial, seconds from the variant's start
    try:
        for task in db.tasks():
            recs = db.records(task.task_key)
            built = [r for r in recs if r.status is not Status.INVALID]
            keys = Counter(schedule_key(r.decisions) for r in built)
            dups = sum(n - 1 for n in keys.values() if n > 1)
            best = db.best(task.task_key)
            base = next((r for r in recs if r.decisions == BASELINE_DECISIONS), None)
            try:
                study = load_task_study(db.optuna_storage(), task.task_key)
                trials = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(OWNER_ATTR)]
            except KeyError:  # no search round on this task (a small budget: its baseline was its share)
                trials = []
            owners = {}
            for t in trials:
                pid = t.user_attrs[OWNER_ATTR][1]
                owners[t.number] = worker_of.get(pid, f"pid {pid}")
            measured = [t for t in trials if TIMING_ATTR in t.user_attrs]  # measured by this tuner (not a duplicate)
            repeats = [t for t in trials if t.user_attrs.get("duplicate")]  # proposed again: told, not measured
            rejected = [t for t in trials if t.user_attrs.get(STATUS_ATTR) == Status.INVALID.value]
            per_worker = Counter(owners[t.number] for t in measured)
            for t in measured:
                w = str(owners[t.number])
                first[w] = min(first.get(w, float("inf")), _ts(t.datetime_start) - t0)
            out["per_worker_trials"].update(per_worker)
            out["foreign_owners"] += sum(not isinstance(w, int) for w in per_worker)
            unfinished = [t for t in trials if not t.state.is_finished()]
            out["unfinished"] += len(unfinished)
            overlaps = []
            for a, b in itertools.combinations([t for t in trials if t.state.is_finished()], 2):
                if owners[a.number] != owners[b.number] and not (
                        a.datetime_complete <= b.datetime_start or b.datetime_complete <= a.datetime_start):
                    overlaps.append([a.number, b.number])
            out["overlaps"] += [[task.name, *o] for o in overlaps]
            out["duplicates"] += dups
            # the task's history: consecutive trials of one worker, in order of their start
            spans: list[dict] = []
            for t in sorted(trials, key=lambda t: t.datetime_start):
                w = owners[t.number]
                if not spans or spans[-1]["worker"] != w:
                    spans.append({"worker": w, "n_trials": 0, "n_measured": 0, "from_s": _ts(t.datetime_start) - t0,
                                  "to_s": None})
                spans[-1]["n_trials"] += 1
                spans[-1]["n_measured"] += TIMING_ATTR in t.user_attrs
                end = _ts(t.datetime_complete)
                if end is not None:
                    spans[-1]["to_s"] = max(spans[-1]["to_s"] or 0.0, end - t0)
            out["tasks"].append({
                "name": task.name, "key": task.task_key, "weight": task.info.get("weight", 1),
                "records": len(recs), "measured": len(built), "ok": sum(r.status is Status.OK for r in built),
                "rejected": len(recs) - len(built), "baselines": sum(r.decisions == BASELINE_DECISIONS for r in recs),
                "measured_trials": len(measured), "rejected_trials": len(rejected), "trials": len(trials),
                "repeat_proposals": len(repeats),
                "per_worker": dict(sorted(per_worker.items(), key=str)),
                "unlinked_records": len(built) - len(measured) - (base is not None),  # default schedules, or lost
                "duplicates": dups, "overlaps": len(overlaps), "handovers": max(len(spans) - 1, 0), "spans": spans,
                "best_s": best.latency_s if best else None,
                "untuned_s": base.latency_s if base is not None and base.status is Status.OK else None})
        out["claims_left"] = [c.worker_id for c in db.claims()]
    finally:
        db.close()
    tasks = out["tasks"]
    out["n_tasks"] = len(tasks)
    out["measured"] = sum(t["measured"] for t in tasks)
    out["ok"] = sum(t["ok"] for t in tasks)
    out["rejected"] = sum(t["rejected"] for t in tasks)
    out["baselines"] = sum(t["baselines"] for t in tasks)
    out["unlinked_records"] = sum(t["unlinked_records"] for t in tasks)
    out["handovers"] = sum(t["handovers"] for t in tasks)
    out["trials"] = sum(t["trials"] for t in tasks)
    out["repeat_proposals"] = sum(t["repeat_proposals"] for t in tasks)
    out["exhausted"] = {str(w["worker"]): w["exhausted"] for w in run["workers"] if w["exhausted"]}
    out["per_worker_trials"] = {str(k): v for k, v in sorted(out["per_worker_trials"].items(), key=str)}
    out["per_worker_first_trial_s"] = dict(sorted(first.items()))
    out["per_worker_reported"] = {str(w["worker"]): (w["result"] or {}).get("new_measurements")
                                  for w in run["workers"]}
    out["per_worker_tasks"] = {str(w["worker"]): sorted(t["name"] for t in tasks if w["worker"] in t["per_worker"])
                               for w in run["workers"]}
    complete = all(t["best_s"] is not None for t in tasks)
    out["estimated_s"] = sum(t["weight"] * t["best_s"] for t in tasks) if complete and tasks else None
    out["untuned_s"] = (sum(t["weight"] * t["untuned_s"] for t in tasks)
                        if tasks and all(t["untuned_s"] is not None for t in tasks) else None)
    budget = args.trials * len(tasks)
    n_workers = len(run["workers"])
    batch = args.batch or 8
    reported = sum(v or 0 for v in out["per_worker_reported"].values())
    out["checks"] = {
        "all_workers_ok": all(w["returncode"] == 0 and w["result"] for w in run["workers"]),
        "one_baseline_per_task": all(t["baselines"] == 1 for t in tasks),
        "no_overlap": not out["overlaps"],
        "no_duplicate": out["duplicates"] == 0,
        "no_unfinished_trial": out["unfinished"] == 0,
        "no_claim_left": not out["claims_left"],
        "every_trial_ours": out["foreign_owners"] == 0,
        # nothing lost: the workers' own counts of new measurements add up to the records (less the baselines)
        "reported_sum_matches_records": reported == out["measured"] - out["baselines"],
        # and each worker's count matches the trials that name it (no default schedules: no unlinked records)
        "per_worker_matches_trials": out["unlinked_records"] > 0 or all(
            (out["per_worker_reported"][str(w["worker"])] or 0) == out["per_worker_trials"].get(str(w["worker"]), 0)
            for w in run["workers"]),
        # the database's budget: what one worker spends, give or take the rounding of the others' last rounds
        "budget_respected": budget <= out["measured"] <= budget + (n_workers - 1) * batch,
        "every_task_tuned": all(t["measured_trials"] > 0 for t in tasks),
    }
    out["budget"] = budget
    return out


# --- the benchmark ------------------------------------------------------------------------------------------------
def variant(args, name: str, n_workers: int, cluster: Cluster, work_dir: Path) -> dict:
    db = work_dir / f"{name}.db"  # fresh: not there yet (the workers race to create it)
    for old in (db, *(db.with_name(db.name + s) for s in ("-journal", "-wal", "-shm"))):
        old.unlink(missing_ok=True)  # a --keep folder of an earlier run: its study would be resumed, not redone
    n_dev = cluster.n_devices()
    if n_dev != args.servers:
        raise RuntimeError(f"variant {name}: {n_dev} RPC devices registered, expected {args.servers}")
    print(f"variant {name}: {n_workers} worker(s) on {db.name} ...", flush=True)
    row: dict = {"variant": name, "workers": n_workers, "load_before": load_now()}
    server_cpu = cluster.server_cpu_s()
    run = run_workers(args, n_workers, db, cluster, work_dir, name)
    row.update(wall_s=run["wall_s"], tuner_cpu_s=run["tuner_cpu_s"], server_cpu_s=cluster.server_cpu_s() - server_cpu,
               argv=run["argv"], worker_runs=run["workers"], load_after=load_now(), devices_after=cluster.n_devices())
    for w in run["workers"]:
        if "error" in w:
            print(f"  worker {w['worker']} (pid {w['pid']}) exit {w['returncode']}: {' | '.join(w['error'])}",
                  flush=True)
    row.update(analyse(db, run, args))
    print(f"  {row['wall_s']:.0f} s, {row['measured']} measurements, per worker {row['per_worker_trials']}", flush=True)
    return row


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def render(rows: list[dict], args, info: dict) -> str:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200, record=True, force_terminal=False, color_system=None)
    table = Table(title=f"{args.model}: 1 worker vs {args.workers} on one database, {args.trials} trials per task "
                        f"(baselines included), measured over TVM RPC on {args.servers} servers; {info['n_cores']} "
                        "cores; wall s = whole processes (B: first start to last exit)")
    for col in ("variant", "workers", "wall s", "CPU s", "tasks", "measured", "ok", "rejected", "per-worker split",
                "reported", "hand-overs", "overlaps", "duplicates", "claims left", "estimated", "untuned"):
        table.add_column(col, justify="left" if col in ("variant", "per-worker split", "reported") else "right")
    for r in rows:
        table.add_row(r["variant"], str(r["workers"]), f"{r['wall_s']:.1f}",
                      f"{r['tuner_cpu_s']:.0f}+{r['server_cpu_s']:.0f}", str(r["n_tasks"]), str(r["measured"]),
                      str(r["ok"]), str(r["rejected"]),
                      " / ".join(f"w{k}:{v}" for k, v in r["per_worker_trials"].items()) + f" (+{r['baselines']} base)",
                      " / ".join(f"w{k}:{v}" for k, v in r["per_worker_reported"].items()),
                      str(r["handovers"]), str(len(r["overlaps"])), str(r["duplicates"]), str(len(r["claims_left"])),
                      _fmt_s(r["estimated_s"]), _fmt_s(r["untuned_s"]))
    console.print(table)
    console.print("CPU s = the tuning processes' CPU + the RPC servers' (measurements); per-worker split = "
                  "measurements by the Optuna trials that name each worker (+ baselines, which no record "
                  "attributes); reported = each worker's own new_measurements; untuned = sum of the baselines (B's "
                  "are measured by the workers at once, while the others import and build: they can read slower)")
    for r in rows:
        console.print(f"variant {r['variant']}: per task (measured by worker; spans = consecutive trials of one "
                      "worker, seconds from the start):")
        for t in r["tasks"]:
            spans = ", ".join(f"w{s['worker']} {s['n_measured']}m/{s['n_trials']}t "
                              f"{s['from_s']:.0f}-{(s['to_s'] or float('nan')):.0f}s" for s in t["spans"])
            console.print(f"  {t['name']}: {t['measured']} measured ({t['baselines']} baseline), split "
                          f"{t['per_worker']}, {t['repeat_proposals']} repeated proposals, best {_fmt_s(t['best_s'])}, "
                          f"untuned {_fmt_s(t['untuned_s'])}; {spans}")
        console.print(f"  tasks per worker: {r['per_worker_tasks']}; first measured trial at (s): "
                      + ", ".join(f"w{k} {v:.0f}" for k, v in r["per_worker_first_trial_s"].items())
                      + f"; 'search space exhausted' (worker: task, trials): {r['exhausted'] or 'none'}")
        failed = [k for k, ok in r["checks"].items() if not ok]
        console.print(f"  checks: {'all passed' if not failed else 'FAILED: ' + ', '.join(failed)} "
                      f"({', '.join(r['checks'])}); load {r['load_before']:.1f} -> {r['load_after']:.1f}")
    if len(rows) == 2 and rows[0]["wall_s"]:
        console.print(f"B/A wall time: {rows[1]['wall_s'] / rows[0]['wall_s']:.2f}x")
    return console.export_text()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="zoo:mlp", help="what `autosched tune` takes: zoo:NAME or an .onnx file")
    p.add_argument("--trials", type=int, default=64, help="--trials of every worker: per task, over the database")
    p.add_argument("--workers", type=int, default=3, help="workers of variant B")
    p.add_argument("--servers", type=int, default=2, help="RPC servers (devices) on 127.0.0.1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=0, help="--batch of every worker (0: autosched's default)")
    p.add_argument("--cost-model", default="none", choices=("none", "random", "xgb"))
    p.add_argument("--timeout-s", type=float, default=1800.0, help="per variant")
    p.add_argument("--keep", help="keep the databases and logs in this folder (default: a temporary one)")
    p.add_argument("--out", default="workers")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    fair_environment(1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally blocks stop the servers and workers
    info = machine_info()
    print(f"machine: {info}", flush=True)
    saved = {k: v for k, v in vars(args).items() if k != "keep"}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        work_dir = Path(args.keep or tmp)
        work_dir.mkdir(parents=True, exist_ok=True)
        rows: list[dict] = []
        with Cluster(args.servers, work_dir) as cluster:
            print(f"RPC tracker {cluster.address}, {cluster.n_devices()} servers under key {KEY}", flush=True)
            for name, n_workers in (("A", 1), ("B", args.workers)):
                rows.append(variant(args, name, n_workers, cluster, work_dir))
                write_json(args.out, {"machine": info, "args": saved, "rows": rows})
    text = render(rows, args, info)
    total_s = time.perf_counter() - started
    summary = {"wall_s": {r["variant"]: r["wall_s"] for r in rows},
               "b_over_a": rows[1]["wall_s"] / rows[0]["wall_s"] if rows[0]["wall_s"] else None,
               "all_checks_passed": all(all(r["checks"].values()) for r in rows), "bench_s": total_s}
    path = write_json(args.out, {"machine": info, "args": saved, "rows": rows, "summary": summary})
    log = RESULTS / f"{args.out}.log"
    log.write_text(f"python bench/workers.py {' '.join(sys.argv[1:])}\nmachine: {info}\n\n{text}\n"
                   f"whole benchmark: {total_s:.0f} s\n")
    print(f"wrote {path} and {log}")


if __name__ == "__main__":
    main()
