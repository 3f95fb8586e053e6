"""What each CLI command does (argument parsing lives in cli.py)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autosched.config import COST_MODELS, TuneConfig
from autosched.errors import UnknownNameError, UserInputError
from autosched.progress import BAR, JSON, QUIET, emit, mode_of, progress_display

_WIDTH = shutil.get_terminal_size((140, 24)).columns
out = Console(highlight=False, width=_WIDTH)
err = Console(stderr=True, highlight=False, width=_WIDTH)


def _fmt_s(seconds: float) -> str:
    if seconds == float("inf") or seconds != seconds:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} us"


def _gflops(flops: float, seconds: float) -> str:
    return f"{flops / seconds / 1e9:.1f}" if 0 < seconds < float("inf") else "-"


def _config(args: argparse.Namespace) -> TuneConfig:
    base = TuneConfig.from_toml(args.config) if getattr(args, "config", None) else TuneConfig()
    try:
        cfg = base.replace(n_trials=args.trials, sampler=args.sampler, seed=args.seed, n_threads=args.threads,
                           batch_size=args.batch, cost_model=args.cost_model,
                           transfer=False if args.no_transfer else None, transfer_model=args.transfer_model,
                           rpc=getattr(args, "rpc", None), rpc_key=getattr(args, "key", None))
    except UserInputError as e:  # name the flag, not the config field, when a flag gave the value
        flags = (("n_trials", "trials"), ("seed", "seed"), ("n_threads", "threads"), ("batch_size", "batch"))
        for field, flag in flags:
            if str(e).startswith(f"config: {field} ") and getattr(args, flag) is not None:
                raise UserInputError(f"--{flag}{str(e)[len('config: ' + field):]}") from e
        raise
    for flag, value in (("--trials", cfg.n_trials), ("--batch", cfg.batch_size), ("--threads", cfg.threads)):
        if value < 1:
            raise UserInputError(f"{flag} must be at least 1")
    from autosched.search.optuna_strategy import SAMPLERS

    if cfg.sampler not in SAMPLERS:
        raise UnknownNameError("sampler", cfg.sampler, list(SAMPLERS))
    if cfg.cost_model not in COST_MODELS:  # a --config file can name one
        raise UnknownNameError("cost model", cfg.cost_model, list(COST_MODELS))
    if cfg.rpc:  # an unreachable tracker or a key without devices: refused before the database opens
        from autosched.measure.rpc import check_tracker

        check_tracker(cfg.rpc, cfg.rpc_key)
    return cfg


def cmd_tune(args: argparse.Namespace) -> int:
    given = [flag for flag, value in (("a MODEL", args.model), ("--op", args.op), ("--func", args.func)) if value]
    if len(given) > 1:
        raise UserInputError(f"give either a MODEL or --op or --func, not {' and '.join(given)}")
    if getattr(args, "shape_buckets", None) and not args.model:
        raise UserInputError("--shape-buckets goes with a MODEL (an ONNX file with symbolic dimensions)")
    if getattr(args, "precision", "fp32") != "fp32" and not args.model:
        raise UserInputError("--precision goes with a MODEL: it is a graph rewrite (tune a bf16 operator with --func)")
    if args.model:
        from autosched.model_commands import tune_model_command

        return tune_model_command(args)
    if args.func:
        return _tune_program(args)
    if not args.op or not args.shape:
        raise UserInputError("nothing to tune: give a MODEL (an .onnx file or zoo:NAME), --op OP --shape DIMS "
                             "or --func PATH.py:NAME")
    from autosched.spaces.settings import settings_for
    from autosched.tasks import op_task
    from autosched.workloads import get_workload, parse_shape

    # Validate everything before the database is opened or created: bad input leaves it untouched.
    cfg = _config(args)
    workload = get_workload(args.op)
    shape = parse_shape(args.shape)
    workload.normalise(shape)
    target = _measurable_target(args.target, cfg)
    return _tune_task(args, cfg, op_task(args.op, shape, target, settings_for(target).version))


def _measurable_target(spec: str, cfg: TuneConfig):
    from autosched.targets import check_measurable
    from autosched.tasks import make_target

    return check_measurable(make_target(spec, cfg.threads), remote=bool(cfg.rpc))


def _tune_program(args: argparse.Namespace) -> int:
    """``--func path.py:name``: a TE compute or PrimFunc is one task; a Relax module is tuned as a model."""
    from autosched.programs import is_relax_module, load_program, program_task

    if args.shape:
        raise UserInputError("--shape goes with --op; a --func program has its own shapes")
    cfg = _config(args)
    program, name = load_program(args.func)
    if is_relax_module(program):
        from autosched.model_commands import tune_model_command
        from autosched.models.frontends import load_model

        args.model = load_model(program, name=name)
        return tune_model_command(args)
    return _tune_task(args, cfg, program_task(program, _measurable_target(args.target, cfg), name))


def _tune_task(args: argparse.Namespace, cfg: TuneConfig, task) -> int:
    """Tune one task (a catalog operator or a program) with a progress bar, then print its table."""
    from autosched.db import open_database

    target = task.target
    if cfg.cost_model == "xgb" and cfg.transfer:
        from autosched.session import load_start_model

        load_start_model(cfg.transfer_model, target.kind.name)  # a bad model is refused before the db opens
    db = open_database(args.db)

    from autosched.session import TuningSession, check_tvm_version
    from autosched.tune import Deadline

    check_tvm_version(db, task)  # before a baseline is measured or anything written

    deadline = Deadline.after(args.time or 0.0)  # --time alone: no trial limit, the clock decides
    n_trials = cfg.n_trials if args.trials or not args.time else 10**9
    with TuningSession(cfg, task.target_json) as session:
        baseline = None if args.no_baseline else session.measure_unscheduled(task)
        done_before, mode = db.n_measured(task.key), mode_of(args)
        if done_before and mode == BAR:
            err.print(f"resuming {task.name}: {done_before} of {cfg.n_trials} trials already in {args.db}")

        def bar():
            return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("best {task.fields[best]} GFLOPS"), TimeElapsedColumn(),
                            TextColumn("left ~{task.fields[eta]}"), console=err, transient=False)

        with progress_display(mode, bar, task.name, n_trials if n_trials < 10**9 else None, best="-",
                              eta="?") as update:
            update(done_before)

            def on_progress(p) -> None:
                left = min(p.eta_s, deadline.left_s()) if p.eta_s == p.eta_s else deadline.left_s()
                eta = f"{max(left, 0):.0f}s" if left < float("inf") else "?"
                if mode == JSON:
                    update(p.n_done, best_gflops=p.best_gflops, elapsed_s=p.elapsed_s, eta_s=left)
                else:
                    update(p.n_done, best=f"{p.best_gflops:.1f}", eta=eta)

            result = session.tune(task, db, on_progress, n_trials=n_trials, deadline=deadline)
    if mode == JSON:
        emit({"event": "result", "task": task.name, "key": task.key, "trials": result.n_measured,
              "new_measurements": result.n_new, "best_latency_s": result.best_latency_s,
              "untuned_latency_s": baseline.latency_s if baseline is not None else None,
              "elapsed_s": result.elapsed_s, "database": args.db})
    elif mode == QUIET:
        out.print(f"{task.name}: best {_fmt_s(result.best_latency_s)} after {result.n_measured} trials "
                  f"({result.n_new} new); database: {args.db}")
    else:
        _print_tune_table(task, result, baseline, args.db)
    db.close()
    return 0


def _print_tune_table(task, result, baseline, db_path: str) -> None:
    from autosched.records import Status

    table = Table(title=f"autosched tune: {task.name} on {task.target.kind.name} ({task.target.attrs.get('mcpu', '')})")
    for col in ("task", "trials", "ok (this run)", "failed", "best latency", "GFLOPS", "untuned", "speedup",
                "s/trial"):
        table.add_column(col, justify="right" if col != "task" else "left")
    ok = result.status_counts[Status.OK]
    failed = sum(v for k, v in result.status_counts.items() if k not in (Status.OK, Status.INVALID))
    base_s = baseline.latency_s if baseline is not None else float("inf")
    speedup = f"{base_s / result.best_latency_s:.1f}x" if base_s < float("inf") and result.best else "-"
    table.add_row(task.name, f"{result.n_measured}", f"{ok}", f"{failed}", _fmt_s(result.best_latency_s),
                  _gflops(task.flops, result.best_latency_s), _fmt_s(base_s), speedup,
                  f"{result.s_per_trial:.2f}" if result.n_new else "-")
    out.print(table)
    out.print(f"database: {db_path}  (this run: {result.n_new} new measurements in {result.elapsed_s:.0f} s)")


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
    from autosched.db import open_database
    from autosched.records import Status

    db = open_database(args.db, create=False)
    table = Table(title=f"autosched show: {args.db}")
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
                      _fmt_s(best.latency_s if best else float("inf")),
                      _gflops(t.flops, best.latency_s if best else float("inf")), _designs(recs, best),
                      _rank_corr(recs), t.task_key)
    # 11 columns: on a narrow terminal the lines wrap rather than names and numbers being cut
    Console(highlight=False, width=max(_WIDTH, 160)).print(table)
    db.close()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from autosched.db import open_database
    from autosched.report import gather

    fmt = args.format or ("json" if args.output.lower().endswith(".json") else "html")
    if fmt == "html":
        from autosched.report_html import render_html, require_matplotlib

        require_matplotlib()  # a missing extra is named before anything is read
    output = Path(args.output)
    if output.is_dir():
        raise UserInputError(f"{output} is a directory: give a file path for the report, e.g. report.{fmt}")
    db = open_database(args.db, create=False)
    try:
        report = gather(db, _display_name(args.db))
    finally:
        db.close()
    if not report.tasks:
        raise UserInputError(f"database {args.db} holds no tasks yet: tune something first")
    text = render_html(report) if fmt == "html" else report.dumps() + "\n"
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UserInputError(f"cannot write {output} ({e.strerror}): pick another -o path") from e
    out.print(f"wrote {output} ({fmt}): {len(report.tasks)} tasks, {report.n_measured} measured candidates")
    return 0


def _display_name(db: str) -> str:
    """The database as the report names it: a path as given, a URL without its password."""
    if "://" not in db:
        return db
    import sqlalchemy as sa

    return sa.make_url(db).render_as_string(hide_password=True)


def cmd_train_cost_model(args: argparse.Namespace) -> int:
    import shlex

    from autosched.cost.training import dataset_from_databases, pairwise_accuracy, train

    data = dataset_from_databases(args.db)
    model = train(data, rounds=args.rounds, seed=args.seed)
    fit_acc = pairwise_accuracy(model.predict(data.X), data.y, data.groups)
    command = "autosched " + " ".join(shlex.quote(a) for a in args.argv)
    model.save(args.output, command=command, trained_on={"databases": args.db, "tasks": data.tasks,
                                                         "training_pairwise_accuracy": fit_acc})
    out.print(f"trained on {len(data.y)} candidates of {len(data.tasks)} tasks ({data.target_family}); "
              f"pairwise accuracy on its own data {fit_acc:.3f}; saved to {args.output}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autosched.db import open_database
    from autosched.db.transfer import export_jsonl

    db = open_database(args.db, create=False)
    n_tasks, n_records = export_jsonl(db, Path(args.output))
    out.print(f"exported {n_tasks} tasks and {n_records} records to {args.output}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from autosched.db import open_database
    from autosched.db.transfer import import_jsonl, read_jsonl

    tasks, records = read_jsonl(Path(args.file))  # fully validated before the database is opened
    db = open_database(args.db)
    n_tasks, n_records = import_jsonl(db, tasks, records)
    out.print(f"imported {n_tasks} new tasks and {n_records} new records into {args.db}")
    return 0
