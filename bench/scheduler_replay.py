"""Benchmark: the task scheduler replayed on recorded tuning runs, one rule against another at the same trial
budget, without tuning again (a model's run takes 10 minutes and one run's luck moves a model 10 %).

    python bench/scheduler_replay.py export bench/results/scheduler_curves.json \\
        mobilenet_v2.t1=a.db,b.db,c.db resnet50.t2=d.db,e.db ...
    python bench/scheduler_replay.py --decays 0.5,0.75,0.9,1.0

``export`` keeps, per set (a model at a thread count) and database, each task's weight, FLOPs, pattern and its
best latency after each trial, in the order the run measured them. The replay draws, for every task, the curve
of one of the set's runs (``--draws`` draws, seeded) and gives ``autosched.scheduler.task_scheduler.TaskScheduler``
(the code imported) the set's median trial budget: a round of a task reads the task's best from its curve.
Past a curve's end the task goes on as the set's longest run of it did from the point where that run reached
the same best (nothing better if it never did). So the replay credits more trials only with what a recorded run
found with them, and it cannot say what trials no run spent would have found. Prints, per set and rule, the
median over draws of the estimated latency (sum of weight x best) and its ratio to the first rule's; writes
bench/results/scheduler_replay.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sqlite3
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, git_commit, write_json  # noqa: E402

CURVES = RESULTS / "scheduler_curves.json"


def task_curves(db_path: str) -> dict[str, dict]:
    """Task name -> weight, flops, info and the best latency after each measured trial (the first is the
    untuned baseline; a failed trial counts with no better time, inf while nothing ran: GPT-2's LM head
    baseline times out)."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    out = {}
    for key, name, info, flops in db.execute("select task_key, name, info, flops from autosched_tasks"):
        lat = [row[0] for row in db.execute("select latency_s from autosched_records where task_key=? order by id",
                                            (key,))]
        if not lat:
            continue
        best, curve = math.inf, []
        for value in lat:
            best = min(best, value if value is not None else math.inf)
            curve.append(float(f"{best:.4g}"))
        info = json.loads(info)
        out[name] = {"weight": info.get("weight", 1), "flops": flops,
                     "info": {k: info[k] for k in ("pattern",) if k in info}, "best_s": curve}
    return out


def export(path: Path, sets: list[str]) -> None:
    payload = {}
    for spec in sets:
        name, _, dbs = spec.partition("=")
        missing = [db for db in dbs.split(",") if not Path(db).is_file()]
        if not dbs or missing:
            sys.exit(f"scheduler_replay: {spec!r}: give NAME=DB,DB,... with existing databases (missing: {missing})")
        runs = [task_curves(db) for db in dbs.split(",")]
        common = set.intersection(*(set(run) for run in runs))
        payload[name] = {"runs": [{task: run[task] for task in sorted(common)} for run in runs],
                         "sources": [Path(db).parent.name + "/" + Path(db).name for db in dbs.split(",")]}
        print(f"{name}: {len(runs)} runs, {len(common)} tasks in all of them")
    path.write_text(json.dumps(payload))


def replay(tasks: dict[str, dict], longest: dict[str, list[float]], budget: int, stale_decay: float,
           cheap_share: float, round_trials: int) -> float:
    """The estimated latency (sum of weight x best) after ``budget`` trials shared by the scheduler."""
    from autosched.scheduler.task_scheduler import TaskScheduler, TaskState, mark_cheap
    from autosched.tasks import Task

    states, curves = [], {}
    for name, t in tasks.items():
        curve = t["best_s"]
        state = TaskState(Task(name, None, None, 1, t["flops"], t["weight"], info=t["info"]), curve[0], curve[0], 1)
        states.append(state)
        curves[id(state)] = curve
    mark_cheap(states, cheap_share)
    scheduler = TaskScheduler(states, budget + len(states), round_trials, stale_decay=stale_decay)

    def best_after(state: TaskState, n: int) -> float:
        curve = curves[id(state)]
        if n <= len(curve):
            return curve[n - 1]
        other = longest[state.task.name]
        start = next((i for i, b in enumerate(other) if b <= curve[-1]), None)
        return curve[-1] if start is None else min(curve[-1], other[min(start + n - len(curve), len(other) - 1)])

    forever = 1e12  # a time limit that never binds: tasks compete from the start, as in a `--time` run
    while (state := scheduler.next_task(forever)) is not None:
        n = state.n_trials + scheduler.round_size(state, forever)
        scheduler.update(state, n, best_after(state, n), exhausted=False)
    return scheduler.estimated_latency_s


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["export"]:
        if len(argv) < 3:
            sys.exit("usage: scheduler_replay.py export OUT.json NAME=DB,DB[,...] ...")
        export(Path(argv[1]), argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--curves", default=str(CURVES), help="curves written by `export`")
    p.add_argument("--decays", default="0.5,0.75,0.9,1.0", help="TaskScheduler stale_decay values; first = base")
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--round-trials", type=int, default=8)
    p.add_argument("--cheap-share", type=float, default=0.01)
    args = p.parse_args(argv)
    decays = [float(d) for d in args.decays.split(",")]
    sets = json.loads(Path(args.curves).read_text())

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Task scheduler replayed on recorded runs: estimated latency, median of {args.draws} draws")
    for col in ("set", "runs", "tasks", "budget", *(f"decay {d}" for d in decays), *(f"{d}/{decays[0]}" for d in
                                                                                      decays[1:])):
        table.add_column(col, justify="left" if col == "set" else "right")
    rows = []
    for name, data in sets.items():
        runs = data["runs"]
        tasks = list(runs[0])
        budget = int(statistics.median(sum(len(run[t]["best_s"]) - 1 for t in tasks) for run in runs))
        longest = {t: max((run[t]["best_s"] for run in runs), key=len) for t in tasks}
        rng = random.Random(args.seed)
        draws = [{t: runs[rng.randrange(len(runs))][t] for t in tasks} for _ in range(args.draws)]
        med = {d: statistics.median(replay(draw, longest, budget, d, args.cheap_share, args.round_trials)
                                    for draw in draws) for d in decays}
        rows.append({"set": name, "runs": len(runs), "tasks": len(tasks), "budget": budget, "sources": data["sources"],
                     "median_latency_s": {str(d): v for d, v in med.items()},
                     "ratio_to_first": {str(d): med[d] / med[decays[0]] for d in decays[1:]}})
        table.add_row(name, str(len(runs)), str(len(tasks)), str(budget), *(f"{med[d] * 1e3:.3f}" for d in decays),
                      *(f"{med[d] / med[decays[0]]:.3f}" for d in decays[1:]))
    Console(width=200).print(table)
    geo = {d: math.exp(statistics.fmean(math.log(r["ratio_to_first"][str(d)]) for r in rows)) for d in decays[1:]}
    print("geometric mean over sets, vs decay", decays[0], {d: round(g, 4) for d, g in geo.items()})
    path = write_json("scheduler_replay", {"commit": git_commit(), "draws": args.draws, "seed": args.seed,
                                           "decays": decays, "rows": rows, "geomean_ratio_to_first": geo})
    print("wrote", path)


if __name__ == "__main__":
    main()
