"""Benchmark: which tasks a model's tuning leaves on their default schedules ("cheap"), by the rule of the time
and by the one before it, on recorded runs.

    python bench/cheap_share.py tuning_logs/example_*.jsonl.gz

Each database's tasks as the scheduler sees them after the defaults phase (weight, untuned latency, best
latency); the cheap set by the old rule (each task of a cheap pattern under ``cheap_share`` of the untuned
latency, on its own) and by ``mark_cheap`` (the smallest of the cheap patterns while together under ``cheap_share``
of the estimate); for each, how many tasks and what share of the final estimate they hold (what no search
reaches). Prints a table, writes bench/results/cheap_share.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_json  # noqa: E402


def states_of(path: str) -> list:
    """The database's tasks with a measured baseline, as the scheduler's states (best: the fastest record)."""
    from autosched.db import open_database
    from autosched.records import Status
    from autosched.scheduler.task_scheduler import TaskState
    from autosched.tasks import Task
    from autosched.tune import BASELINE_DECISIONS

    db = open_database(path, create=False)
    states = []
    for row in db.tasks():
        ok = [r for r in db.records(row.task_key) if r.target == row.target and r.status is Status.OK and r.latencies_s]
        base = next((r for r in ok if r.decisions == BASELINE_DECISIONS), None)
        if base is not None:
            task = Task(row.name, None, None, 1, row.flops, int(row.info.get("weight", 1)), info=dict(row.info))
            states.append(TaskState(task, base.latency_s, min(r.latency_s for r in ok)))
    return states


def old_rule(states: list, share: float) -> None:
    """The rule before: each task on its own, a cheap pattern under ``share`` of the untuned latency."""
    from autosched.scheduler.task_scheduler import INF, is_cheap_pattern

    total = sum(s.task.weight * s.untuned_s for s in states if s.untuned_s < INF)
    for s in states:
        own = s.task.weight * s.untuned_s / total if total and s.untuned_s < INF else INF
        s.cheap = own < share and is_cheap_pattern(s.task)


def row_of(path: str, share: float) -> dict:
    from autosched.scheduler.task_scheduler import mark_cheap

    states = states_of(path)
    estimate = sum(s.contribution_s for s in states) or 1.0
    row: dict = {"database": Path(path).name, "tasks": len(states)}
    for name, rule in (("old", old_rule), ("new", mark_cheap)):
        rule(states, share)
        cheap = [s for s in states if s.cheap]
        row[f"{name}_cheap"] = len(cheap)
        row[f"{name}_share"] = sum(s.contribution_s for s in cheap) / estimate
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("databases", nargs="+")
    p.add_argument("--cheap-share", type=float, default=0.01)
    p.add_argument("--out", default="cheap_share")
    args = p.parse_args()
    rows = [row_of(path, args.cheap_share) for path in args.databases]
    print(f"cheap_share {args.cheap_share:g}: tasks left on defaults, and their share of the final estimate")
    print(f"{'database':32} {'tasks':>5}  {'old rule':>16}  {'mark_cheap':>16}")
    for r in rows:
        print(f"{r['database']:32} {r['tasks']:5d}  {r['old_cheap']:5d} {r['old_share']:10.1%}  "
              f"{r['new_cheap']:5d} {r['new_share']:10.1%}")
    path = write_json(args.out, {"machine": machine_info(), "args": vars(args), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
