"""CLI commands on a tuning database: ``show``, ``report``, ``export``, ``import``, ``train-cost-model``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autosched.cli.output import WIDTH, fmt_s, gflops, out
from autosched.db import display_name, open_database
from autosched.errors import UserInputError


def _rank_corr(records) -> str:
    """Spearman correlation of the cost model's scores with measured speed (records it screened)."""
    from scipy.stats import spearmanr

    from autosched.records import Status

    pairs = [(r.predicted_score, -r.latency_s) for r in records
             if r.predicted_score is not None and r.status is Status.OK and r.latencies_s]
    if len(pairs) < 5:
        return "-"
    rho = spearmanr([p[0] for p in pairs], [p[1] for p in pairs]).statistic
    return f"{rho:+.2f} (n={len(pairs)})"


def _designs(records, best) -> str:
    """Measured trials per schedule design, the best record's design starred: "0:12 1:40* default:1" (default:
    the untuned baseline). A design the search has left shows as a small count ("-": a space with one design)."""
    from collections import Counter

    from autosched.records import Status

    counts = Counter(r.params.get("design") for r in records if r.status is not Status.INVALID)
    if set(counts) <= {None}:
        return "-"
    star = best.params.get("design") if best else None
    return " ".join(f"{'default' if d is None else d}:{n}{'*' if d == star else ''}"
                    for d, n in sorted(counts.items(), key=lambda x: (x[0] is None, str(x[0]))))


def cmd_show(args: argparse.Namespace) -> int:
    with open_database(args.db, read_only=True) as db:
        _show(db, display_name(args.db))
    return 0


def _show(db, name: str) -> None:
    from autosched.records import Status

    table = Table(title=f"autosched show: {name}")
    tasks = db.tasks()
    name_width = min(40, max((len(t.name) for t in tasks), default=4))
    for col in ("task", "target", "trials", "ok", "failed", "rejected", "best latency", "GFLOPS",
                "trials per design", "model rank corr.", "key"):
        table.add_column(col, justify="left" if col in ("task", "target", "trials per design", "key") else "right",
                         no_wrap=col in ("task", "target", "key"), min_width=name_width if col == "task" else None)
    for t in tasks:
        recs = db.records(t.task_key)
        best = db.best(t.task_key)
        target = json.loads(t.target)
        n_ok = sum(r.status is Status.OK for r in recs)
        n_rej = sum(r.status is Status.INVALID for r in recs)
        table.add_row(t.name, f"{target.get('kind')} {target.get('mcpu', '')} x{target.get('num-cores', '')}",
                      str(len(recs) - n_rej), str(n_ok), str(len(recs) - n_rej - n_ok), str(n_rej),
                      fmt_s(best.latency_s if best else float("inf")),
                      gflops(t.flops, best.latency_s if best else float("inf")), _designs(recs, best),
                      _rank_corr(recs), t.task_key)
    # 11 columns: on a narrow terminal the lines wrap rather than names and numbers being cut
    Console(highlight=False, width=max(WIDTH, 160)).print(table)


def cmd_report(args: argparse.Namespace) -> int:
    from autosched.report import gather

    fmt = args.format or ("json" if args.output.lower().endswith(".json") else "html")
    if fmt == "html":
        from autosched.report_html import render_html, require_matplotlib

        require_matplotlib()  # a missing extra is named before anything is read
    output = Path(args.output)
    if output.is_dir():
        raise UserInputError(f"{output} is a directory: give a file path for the report, e.g. report.{fmt}")
    with open_database(args.db, read_only=True) as db:
        report = gather(db, display_name(args.db))
    if not report.tasks:
        raise UserInputError(f"database {display_name(args.db)} holds no tasks yet: tune something first")
    text = render_html(report) if fmt == "html" else report.dumps() + "\n"
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UserInputError(f"cannot write {output} ({e.strerror}): pick another -o path") from e
    out.print(f"wrote {output} ({fmt}): {len(report.tasks)} tasks, {report.n_measured} measured candidates")
    return 0


def cmd_train_cost_model(args: argparse.Namespace) -> int:
    import shlex

    from autosched.cost.training import dataset_from_databases, pairwise_accuracy, train

    data = dataset_from_databases(args.db)
    model = train(data, rounds=args.rounds, seed=args.seed)
    fit_acc = pairwise_accuracy(model.predict(data.X), data.y, data.groups)
    command = "autosched " + " ".join(shlex.quote(a) for a in args.argv)
    model.save(args.output, command=command, trained_on={"databases": [display_name(d) for d in args.db],
                                                         "tasks": data.tasks, "training_pairwise_accuracy": fit_acc})
    out.print(f"trained on {len(data.y)} candidates of {len(data.tasks)} tasks ({data.target_family}); "
              f"pairwise accuracy on its own data {fit_acc:.3f}; saved to {args.output}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autosched.db.transfer import export_jsonl

    with open_database(args.db, read_only=True) as db:
        n_tasks, n_records = export_jsonl(db, Path(args.output))
    out.print(f"exported {n_tasks} tasks and {n_records} records to {args.output}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from autosched.db.transfer import import_jsonl, read_jsonl

    tasks, records, selections = read_jsonl(Path(args.file))  # fully validated before the database is opened
    with open_database(args.db) as db:
        n_tasks, n_records = import_jsonl(db, tasks, records, selections)
    out.print(f"imported {n_tasks} new tasks and {n_records} new records into {display_name(args.db)}")
    return 0
