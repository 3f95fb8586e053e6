"""CLI commands that tune one task: ``tune --op OP --shape DIMS`` (a catalog operator) and ``tune --func
PATH.py:NAME`` (a TE compute or PrimFunc); each is the API's plan, then its tuning, with a progress bar."""

from __future__ import annotations

import argparse
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autosched.api import TaskPlan, operator_task, tune_planned_task, tuning_database, tuning_target
from autosched.cli.output import BAR, JSON, QUIET, emit, err, fmt_s, gflops, mode_of, out, progress_display
from autosched.cli.parser import config_from_args
from autosched.config import NO_TRIAL_LIMIT
from autosched.db import display_name


def cmd_tune_operator(args: argparse.Namespace) -> int:
    # Everything is checked before the database is opened or created: bad input leaves it untouched.
    config = config_from_args(args)
    task = operator_task(args.op, args.shape, tuning_target(args.target, config))
    return _tune(args, TaskPlan.of(task, config))


def cmd_tune_program(args: argparse.Namespace, program: Any, name: str) -> int:
    """``--func``: a TE compute or PrimFunc as one task."""
    from autosched.programs import program_task

    config = config_from_args(args)
    return _tune(args, TaskPlan.of(program_task(program, tuning_target(args.target, config), name), config))


def _tune(args: argparse.Namespace, plan: TaskPlan) -> int:
    """Tune the plan's task with a progress bar (or JSON lines), then print its table."""
    task, config, deadline = plan.task, plan.config, plan.deadline
    mode, db_name = mode_of(args), display_name(args.db)
    limit = config.trial_limit

    def bar():
        return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("best {task.fields[best]} GFLOPS"), TimeElapsedColumn(),
                        TextColumn("left ~{task.fields[eta]}"), console=err, transient=False)

    # the database is opened (and checked) before the bar: a bad one is one line, with no bar above it
    with tuning_database(args.db, [task]) as db, progress_display(
            mode, bar, task.name, limit if limit < NO_TRIAL_LIMIT else None, best="-", eta="?") as update:

        def on_start(done_before: int) -> None:
            if done_before and mode == BAR:
                err.print(f"resuming {task.name}: {done_before} of {config.n_trials} trials already in {db_name}")
            update(done_before)

        def on_progress(p) -> None:
            left = min(p.eta_s, deadline.left_s()) if p.eta_s == p.eta_s else deadline.left_s()
            eta = f"{max(left, 0):.0f}s" if left < float("inf") else "?"
            if mode == JSON:
                update(p.n_done, best_gflops=p.best_gflops, elapsed_s=p.elapsed_s, eta_s=left)
            else:
                update(p.n_done, best=f"{p.best_gflops:.1f}", eta=eta)

        result, baseline = tune_planned_task(plan, db, on_progress, baseline=not args.no_baseline, on_start=on_start)
    if mode == JSON:
        emit({"event": "result", "task": task.name, "key": task.key, "trials": result.n_measured,
              "new_measurements": result.n_new, "best_latency_s": result.best_latency_s,
              "untuned_latency_s": baseline.latency_s if baseline is not None else None,
              "elapsed_s": result.elapsed_s, "database": db_name})
    elif mode == QUIET:
        out.print(f"{task.name}: best {fmt_s(result.best_latency_s)} after {result.n_measured} trials "
                  f"({result.n_new} new); database: {db_name}")
    else:
        _print_tune_table(task, result, baseline, db_name)
    return 0


def _print_tune_table(task, result, baseline, db_name: str) -> None:
    from autosched.records import Status

    table = Table(title=f"autosched tune: {task.name} on {task.target.kind.name} ({task.target.attrs.get('mcpu', '')})")
    for col in ("task", "trials", "ok (this run)", "failed", "best latency", "GFLOPS", "untuned", "speedup",
                "s/trial"):
        table.add_column(col, justify="right" if col != "task" else "left")
    ok = result.status_counts[Status.OK]
    failed = sum(v for k, v in result.status_counts.items() if k not in (Status.OK, Status.INVALID))
    base_s = baseline.latency_s if baseline is not None else float("inf")
    speedup = f"{base_s / result.best_latency_s:.1f}x" if base_s < float("inf") and result.best else "-"
    table.add_row(task.name, f"{result.n_measured}", f"{ok}", f"{failed}", fmt_s(result.best_latency_s),
                  gflops(task.flops, result.best_latency_s), fmt_s(base_s), speedup,
                  f"{result.s_per_trial:.2f}" if result.n_new else "-")
    out.print(table)
    out.print(f"database: {db_name}  (this run: {result.n_new} new measurements in {result.elapsed_s:.0f} s)")
