"""CLI commands for whole models: ``tune MODEL``, ``inspect``, ``compile``, ``run`` (parsing is in cli.py).

Every command loads and rewrites the model before it opens a database or writes a file, so bad input
(missing file, not ONNX, unknown input name, wrong rank) stops it with nothing written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autosched.commands import _config, _fmt_s, _gflops, err, out
from autosched.errors import UserInputError
from autosched.progress import BAR, JSON, QUIET, emit, mode_of, progress_display, step


def _model_target(args: argparse.Namespace, n_threads: int, runs_here: bool = True):
    """The command's --target at ``n_threads`` threads, checked to run here (or on --rpc devices) unless the
    command only builds for it (``runs_here=False``: compile, to deploy on another CPU)."""
    from autosched.targets import check_measurable
    from autosched.tasks import make_target

    for flag, value in (("--threads", n_threads), ("--repeat", getattr(args, "repeat", 1))):
        if value < 1:
            raise UserInputError(f"{flag} must be at least 1")
    target = make_target(args.target, n_threads)
    if not runs_here and target.kind.name == "llvm":
        return target
    return check_measurable(target, remote=bool(getattr(args, "rpc", None)))


def _load(args: argparse.Namespace, n_threads: int, runs_here: bool = True):
    """(model, target, fused module) from the command's MODEL, --input, --target and thread count."""
    from autosched.api import load_model
    from autosched.models.frontends import parse_input_shapes

    target = _model_target(args, n_threads, runs_here)
    shapes = parse_input_shapes(args.input)
    mode = mode_of(args)
    if hasattr(args.model, "mod"):  # --func's Model
        model = args.model
    else:
        with step(mode, err, f"importing {args.model}"):
            model = load_model(args.model, shapes)
    _set_precision(model, args)
    with step(mode, err, f"{model.name}: graph rewrites"):
        fused = rewrite_reporting(model, target)
    return model, target, fused


def _load_buckets(args: argparse.Namespace, n_threads: int):
    """``--shape-buckets``: (symbolic inputs, [(sizes, model, fused module)] one per bucket, target)."""
    from autosched.models.buckets import bucket_label, load_buckets, parse_shape_buckets
    from autosched.models.frontends import parse_input_shapes

    target = _model_target(args, n_threads)
    buckets = parse_shape_buckets(args.shape_buckets)
    if hasattr(args.model, "mod"):
        raise UserInputError("--shape-buckets needs an ONNX model with symbolic dimensions, not a --func program")
    mode = mode_of(args)
    with step(mode, err, f"importing {args.model} at {len(buckets)} symbol(s)' buckets"):
        symbolic, models = load_buckets(args.model, buckets, parse_input_shapes(args.input))
    loaded = []
    for sizes, model in models:
        _set_precision(model, args)
        with step(mode, err, f"{model.name}: graph rewrites ({bucket_label(sizes)})"):
            loaded.append((sizes, model, rewrite_reporting(model, target)))
    return symbolic, loaded, target


TOLERANCES = {"fp32": 1e-3, "bf16": 2e-2, "fp16": 1e-2, "int8": 5e-2}  # default --tolerance of run, per --precision


def _tolerance(args: argparse.Namespace) -> float:
    return args.tolerance if args.tolerance is not None else TOLERANCES[getattr(args, "precision", "fp32")]


def _set_precision(model, args: argparse.Namespace) -> None:
    from autosched.models.precision import with_precision

    model.mod = with_precision(model.mod, getattr(args, "precision", "fp32"))


def rewrite_reporting(model, target, on_pass=None):
    """The graph rewrites, with one line on the terminal for each rewrite the model had to go without."""
    from autosched.models.graph import rewrite

    fallbacks: list = list(model.info.get("fallbacks", []))  # steps of the import the model went without
    fused = rewrite(model.mod, target, on_pass, fallbacks, model.name)
    for fb in fallbacks:
        err.print(f"{model.name}: {fb}", style="yellow", highlight=False, soft_wrap=True)
    return fused


def _mb(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.2f} MiB"


# --- inspect ---------------------------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace) -> int:
    from autosched.api import load_model
    from autosched.models.frontends import parse_input_shapes
    from autosched.models.graph import extract_tasks, fusion_groups, memory_plan
    from autosched.spaces.settings import settings_for
    from autosched.tasks import make_target

    target = make_target(args.target, args.threads)
    model = load_model(args.model, parse_input_shapes(args.input))
    _set_precision(model, args)
    changes = []
    fused = rewrite_reporting(model, target, on_pass=changes.append)
    out.print(f"[bold]{model.name}[/] ({model.source}) inputs: "
              + ", ".join(f"{s.name} {'x'.join(map(str, s.shape))} {s.dtype}" for s in model.inputs))
    if "onnx_nodes" in model.info:
        before, after = model.info["onnx_nodes"]
        out.print(f"ONNX graph: {before} nodes, {after} after folding constants and shapes (ONNX Runtime, basic level)")

    table = Table(title="graph rewrites (operators before -> after)")
    for col in ("pass", "ops before", "ops after", "what changed"):
        table.add_column(col, justify="right" if col.startswith("ops") else "left")
    for c in changes:
        shown = _summary(c.changed)
        table.add_row(c.name, str(sum(c.before.values())), str(sum(c.after.values())), shown or "-")
    out.print(table)

    groups = fusion_groups(fused)
    keys = {t.info["group"]: t.key for t in extract_tasks(fused, target, settings_for(target).version)}
    total_flops = sum(g.flops * g.weight for g in groups) or 1.0
    table = Table(title=f"fusion groups: {len(groups)} distinct, {sum(g.weight for g in groups)} calls, "
                        f"{len(set(keys.values()))} tasks")
    for col in ("group", "pattern", "calls (weight)", "MFLOP per call", "share of FLOPs", "task key"):
        table.add_column(col, justify="left" if col in ("group", "pattern", "task key") else "right")
    for g in groups:
        flops = g.flops
        table.add_row(g.name, g.pattern, str(g.weight), f"{flops / 1e6:.2f}",
                      f"{flops * g.weight / total_flops:.1%}", keys.get(g.name, "(merged)"))
    out.print(table)

    plan = memory_plan(fused, target)
    saved = 1 - plan.planned_bytes / plan.unplanned_bytes if plan.unplanned_bytes else 0.0
    out.print(f"memory of intermediates: peak {_mb(plan.planned_bytes)} after static memory planning "
              f"({plan.n_tensors} tensors in {plan.n_storages} storage blocks), {_mb(plan.unplanned_bytes)} "
              f"without it ({saved:.0%} saved)")
    return 0


def _summary(changed: dict[str, int]) -> str:
    """'+4 add, -2 divide', with TIR kernels and fused-group calls counted as one kind each."""
    kinds: dict[str, int] = {}
    for key, delta in changed.items():
        prefix = key.split(":")[0] if ":" in key else None
        kind = {"tir": "TIR kernel calls", "call": "fused-group calls"}.get(prefix, key)
        kinds[kind] = kinds.get(kind, 0) + delta
    diff = sorted(((k, v) for k, v in kinds.items() if v), key=lambda kv: -abs(kv[1]))
    return ", ".join(f"{v:+d} {k}" for k, v in diff[:5]) + (f", ... ({len(diff) - 5} more)" if len(diff) > 5 else "")


# --- tune ------------------------------------------------------------------------------------------------
def tune_model_command(args: argparse.Namespace) -> int:
    from autosched.db import open_database
    from autosched.models.graph import extract_tasks, fusion_groups
    from autosched.models.tuning import tune_model_tasks
    from autosched.session import TuningSession, check_tvm_version, load_start_model
    from autosched.spaces.settings import settings_for
    from autosched.tune import Deadline

    cfg = _config(args).for_model()  # weights timed out of the caches, as in the model
    if args.time is not None:  # --time alone lifts the trial limit
        cfg = cfg.replace(time_budget_s=args.time, n_trials=cfg.n_trials if args.trials else 0)
    deadline = Deadline.after(cfg.time_budget_s)  # the budget covers the whole command from here
    if getattr(args, "shape_buckets", None):
        model, target, tasks, n_groups = _bucket_tasks(args, cfg.threads)
    else:
        model, target, fused = _load(args, cfg.threads)
        with step(mode_of(args), err, f"{model.name}: task extraction"):
            tasks = extract_tasks(fused, target, settings_for(target).version)
        n_groups = len(fusion_groups(fused))
    if cfg.cost_model == "xgb" and cfg.transfer:
        load_start_model(cfg.transfer_model, target.kind.name)
    db = open_database(args.db)
    for task in tasks:
        check_tvm_version(db, task)  # before anything is measured or written
    total = cfg.n_trials * len(tasks) or None
    budget = [f"{cfg.n_trials} trials per task on average ({total} in all, earlier runs in {args.db} included)"
              ] if total else []
    budget += [f"time budget {cfg.time_budget_s:g} s (baselines included)"] if cfg.time_budget_s else []
    mode = mode_of(args)
    if mode == BAR:
        err.print(f"{model.name}: {len(tasks)} tasks from {n_groups} fusion groups, {' and '.join(budget)}")

    def bar():
        return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("est. {task.fields[est]} (untuned {task.fields[untuned]})"),
                        TextColumn("{task.fields[now]}"), TimeElapsedColumn(), TextColumn("{task.fields[left]}"),
                        console=err)

    with TuningSession(cfg, tasks[0].target_json) as session, progress_display(
            mode, bar, model.name, total, est="?", untuned="?", now="", left="left ~?") as update:
        of_budget = f" of {cfg.time_budget_s:g}s" if cfg.time_budget_s else ""

        def on_progress(p) -> None:
            if mode == JSON:
                update(p.n_done, estimated_s=p.estimated_s, untuned_s=p.untuned_s, now=p.task_name,
                       elapsed_s=p.elapsed_s, eta_s=p.eta_s)
                return
            left = f"left ~{p.eta_s:.0f}s{of_budget}" if p.eta_s == p.eta_s else "left ~?"
            update(p.n_done, est=_fmt_s(p.estimated_s), untuned=_fmt_s(p.untuned_s), now=p.task_name, left=left)

        result = tune_model_tasks(session, tasks, db, cfg.n_trials, on_progress, deadline)
    if mode == JSON:
        emit({"event": "result", "model": model.name, "fusion_groups": n_groups, "tasks": result.n_tasks,
              "tuned": result.n_tuned, "default": result.n_default, "estimated_s": result.estimated_s,
              "untuned_s": result.untuned_s, "new_measurements": result.n_new, "elapsed_s": result.elapsed_s,
              "out_of_time": result.out_of_time, "database": args.db})
    elif mode == QUIET:
        out.print(f"{model.name}: {result.n_tasks} tasks, estimated {_fmt_s(result.estimated_s)} per inference "
                  f"(untuned {_fmt_s(result.untuned_s)}); {result.n_new} new measurements; database: {args.db}")
    else:
        _print_model_table(model.name, result, args.db, n_groups)
    db.close()
    return 0


def _bucket_tasks(args: argparse.Namespace, n_threads: int):
    """(model of the first bucket named after the source, target, tasks of every bucket merged, fusion groups)."""
    from autosched.models.buckets import merge_bucket_tasks
    from autosched.models.graph import extract_tasks, fusion_groups
    from autosched.spaces.settings import settings_for

    _, loaded, target = _load_buckets(args, n_threads)
    with step(mode_of(args), err, f"task extraction ({len(loaded)} buckets)"):
        per_bucket = [(sizes, extract_tasks(fused, target, settings_for(target).version))
                      for sizes, _, fused in loaded]
    tasks = merge_bucket_tasks(per_bucket)
    model = loaded[0][1]
    model.name = model.name.split("@")[0]
    if mode_of(args) == BAR:
        err.print(f"{model.name}: {len(loaded)} buckets, {sum(len(t) for _, t in per_bucket)} bucket tasks -> "
                  f"{len(tasks)} distinct tasks", highlight=False)
    return model, target, tasks, sum(len(fusion_groups(fused)) for _, _, fused in loaded)


def _print_model_table(name: str, result, db_path: str, n_groups: int) -> None:
    reached = sum(_searched(st) == "searched" for st in result.states)
    counts = (f"{n_groups} fusion groups -> {result.n_tasks} distinct tasks, {result.n_tuned} to search "
              f"({reached} searched in this run), {result.n_default} on default schedules (cheap)"
              + (f", {len(result.unmeasured)} not measured (out of time)" if result.unmeasured else ""))
    table = Table(title=f"autosched tune: {name}: {counts}")
    for col in ("task", "pattern", "weight", "schedule", "trials", "untuned", "best", "GFLOPS", "speedup",
                "share of est."):
        table.add_column(col, justify="left" if col in ("task", "pattern", "schedule") else "right")
    total = result.estimated_s or 1.0
    for s in sorted(result.states, key=lambda s: -s.contribution_s):
        speedup = s.untuned_s / s.best_s if s.best_s < float("inf") and s.untuned_s < float("inf") else float("nan")
        table.add_row(s.task.name, s.task.info.get("pattern", ""), str(s.task.weight),
                      _searched(s), str(s.n_trials), _fmt_s(s.untuned_s),
                      _fmt_s(s.best_s), _gflops(s.task.flops, s.best_s),
                      f"{speedup:.1f}x" if speedup == speedup else "-", f"{s.contribution_s / total:.0%}")
    out.print(table)
    gain = result.untuned_s / result.estimated_s if result.estimated_s else float("nan")
    stop = "; stopped by the time budget" if result.out_of_time else ""
    out.print(f"{name}: {counts}")
    out.print(f"estimated kernel time per inference: {_fmt_s(result.estimated_s)} (untuned {_fmt_s(result.untuned_s)}, "
              f"{gain:.1f}x); {result.n_new} new measurements in {result.elapsed_s:.0f} s "
              f"({result.n_new / max(result.elapsed_s, 1e-9):.1f} per second){stop}; database: {db_path}")
    _print_unchecked([s.task for s in result.states])


def _searched(state) -> str:
    """Whether the run searched the task: "default (cheap)" (kept on its default), "searched", or "default (not
    reached)" (its search never got a round before the budget ended: it runs its default schedule or the
    untuned build, whichever was faster)."""
    if state.cheap:
        return "default (cheap)"
    return "searched" if state.n_round_trials or state.round_s else "default (not reached)"


def _print_unchecked(tasks: list) -> None:
    """Tasks whose candidates could not be fully checked against the reference, by name and count."""
    partial = [t for t in tasks if not t.info.get("check", "full").startswith("full")]
    if partial:
        err.print(f"{len(partial)} of {len(tasks)} tasks could not be fully checked (reference outputs not finite "
                  "for any input domain): " + "; ".join(f"{t.name}: {t.info['check']}" for t in partial),
                  style="yellow", highlight=False, soft_wrap=True)


# --- compile / run ---------------------------------------------------------------------------------------
def _open_existing(path: str):
    from autosched.db import open_database

    return open_database(path, create=False)


def _warn_if_no_match(compiled, db, target) -> None:
    """Say so when schedules came from another thread count, or when nothing tuned matched this target."""
    import json
    from collections import Counter

    threads = target.attrs.get("num-cores")
    if compiled.borrowed:
        counts = Counter(compiled.borrowed.values())
        tuned_at = ", ".join(f"{n} thread(s) for {k} group(s)" for n, k in sorted(counts.items()))
        err.print(f"note: the database has no schedules tuned at {threads} thread(s) for {len(compiled.borrowed)} "
                  f"fusion group(s): using the ones tuned at {tuned_at} (tune with --threads {threads} to "
                  "tune for this setting)", style="yellow", highlight=False)
    if compiled.foreign:
        from autosched.models.foreign import Adopted

        err.print(f"note: {Adopted(compiled.foreign, Counter()).summary()}, timed against their default and untuned "
                  "builds (tune here to go further)", style="yellow", highlight=False)
    if compiled.skipped:
        err.print("note: records not applied: " + ", ".join(f"{n} {why}" for why, n in compiled.skipped.items())
                  + " (a schedule is only applied to the target and TVM release it was measured on)",
                  style="yellow", highlight=False)
    if compiled.counts()["tuned"] or compiled.counts()["transferred"] or compiled.foreign or not db.tasks():
        return
    others = {json.loads(t.target).get("num-cores") for t in db.tasks()}
    err.print(f"warning: none of the {len(db.tasks())} tasks in the database is for this target "
              f"({target.kind.name}, {threads} threads); it holds tasks for "
              f"{', '.join(str(o) for o in sorted(others, key=str))} thread(s): use the --target of the tuning "
              "run", style="yellow")


def _print_precision(compiled) -> None:
    if compiled.precision_error is not None:
        out.print(f"{compiled.precision}: max relative error against float32 on 3 random inputs: "
                  f"{compiled.precision_error:.2e}", highlight=False)


def _compile_showing_progress(model, target, db, fused):
    from autosched.models.build import compile_model

    with step(BAR, err, f"{model.name}: compiling") as update:
        return compile_model(model, target, db, fused=fused, on_progress=update)


def _padding_needs_buckets(args: argparse.Namespace) -> None:
    if getattr(args, "max_padding", None) is not None and not getattr(args, "shape_buckets", None):
        raise UserInputError("--max-padding goes with --shape-buckets (the sizes it fills in between)")


def cmd_compile(args: argparse.Namespace) -> int:
    _padding_needs_buckets(args)
    if getattr(args, "shape_buckets", None):
        return _compile_buckets_command(args)
    db = _open_existing(args.db)
    model, target, fused = _load(args, args.threads, runs_here=False)  # another CPU's build is fine: not run here
    output = Path(args.output)
    if output.is_dir():
        raise UserInputError(f"-o {output} is a folder: give a file path such as {output / (model.name + '.so')}")
    compiled = _compile_showing_progress(model, target, db, fused)
    _warn_if_no_match(compiled, db, target)
    compiled.export_library(output)
    n = compiled.counts()
    out.print(f"{model.name}: {len(compiled.sources)} fusion groups: {n['tuned']} tuned (best record in {args.db}), "
              f"{n['default']} default schedule, {n['unscheduled']} unscheduled; wrote {output} and {output}.json")
    _print_precision(compiled)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    _padding_needs_buckets(args)
    if getattr(args, "shape_buckets", None):
        return _run_buckets_command(args)
    from autosched._tvm import set_num_threads
    from autosched.models.build import compile_unscheduled
    from autosched.models.reference import max_relative_error, onnxruntime_session, reference_session, run_onnxruntime
    from autosched.timing import time_interleaved

    model, target, fused = _load(args, args.threads)
    session = onnxruntime_session(model, args.threads)  # refuses non-ONNX models before any build
    db = _open_existing(args.db)
    inputs = model.random_inputs(args.seed)
    want = run_onnxruntime(reference_session(model, args.threads, session), model, inputs)
    tuned = _compile_showing_progress(model, target, db, fused)
    _warn_if_no_match(tuned, db, target)
    untuned = compile_unscheduled(model, target, fused=fused)
    set_num_threads(args.threads)
    feed = {spec.name: x for spec, x in zip(model.inputs, inputs, strict=True)}
    times = time_interleaved({"tuned": lambda: tuned(*inputs), "untuned": lambda: untuned(*inputs),
                              "ort": lambda: session.run(None, feed)}, args.repeat, min_round_s=0.1)
    tuned_s, untuned_s, ort_s = (float(np.median(times[k])) for k in ("tuned", "untuned", "ort"))
    worst = max_relative_error(tuned(*inputs), want)
    table = Table(title=f"autosched run: {model.name}, {args.threads} thread(s), latency of the call from Python "
                        "(median of interleaved rounds)")
    for col in ("build", "median latency", "vs untuned", "vs ONNX Runtime", "max rel. error vs ORT"):
        table.add_column(col, justify="left" if col == "build" else "right")
    for label, seconds, error in (("autosched (tuned)", tuned_s, f"{worst:.2e}"),
                                  ("TVM untuned", untuned_s, f"{max_relative_error(untuned(*inputs), want):.2e}"),
                                  ("ONNX Runtime", ort_s, "-")):
        table.add_row(label, _fmt_s(seconds), f"{untuned_s / seconds:.1f}x", f"{ort_s / seconds:.2f}x", error)
    out.print(table)
    n = tuned.counts()
    _print_precision(tuned)
    dlight = f", {n['dlight']} dlight" if n["dlight"] else ""
    out.print(f"fusion groups: {n['tuned']} tuned, {n['default']} default schedule{dlight}, {n['unscheduled']} "
              "unscheduled")
    if args.profile > 0:
        from autosched.models.profiling import profile

        out.print(f"per call (TVM's kernels and the VM's builtins, {args.threads} thread(s), ms per inference):")
        out.print(profile(tuned, inputs).table(top=args.profile), highlight=False)
    tolerance = _tolerance(args)
    if worst > tolerance:
        err.print(f"autosched: error: tuned outputs differ from ONNX Runtime's (max rel. error {worst:.2e} > "
                  f"{tolerance:g})", style="red")
        return 1
    out.print(f"outputs match ONNX Runtime (max rel. error {worst:.2e} <= {tolerance:g}"
              + (f", {args.precision}" if args.precision != "fp32" else "") + ")")
    return 0


# --- models with symbolic dimensions (--shape-buckets) -------------------------------------------------------------
def _compile_buckets(args: argparse.Namespace, db):
    """(bucketed model, the first bucket's model, target): every bucket compiled and the padding checked."""
    from autosched.models.buckets import compile_buckets
    from autosched.models.frontends import parse_input_shapes

    symbolic, loaded, target = _load_buckets(args, args.threads)
    source, fixed = args.model, parse_input_shapes(args.input)

    def reload(sizes):
        from autosched.api import load_model

        model = load_model(source, {**fixed, **symbolic.shapes(sizes)})
        _set_precision(model, args)
        return model

    with step(mode_of(args), err, "compiling buckets") as update:
        bucketed = compile_buckets(symbolic, [(s, m) for s, m, _ in loaded], target, db, reload,
                                   lambda label: update(label), fused=[f for _, _, f in loaded],
                                   max_padding=getattr(args, "max_padding", None))
    for compiled in bucketed.compiled.values():
        _warn_if_no_match(compiled, db, target)
    return bucketed, loaded[0][1], target


def _compile_buckets_command(args: argparse.Namespace) -> int:
    from autosched.models.buckets import export_buckets

    output = Path(args.output)
    if output.is_dir():
        raise UserInputError(f"-o {output} is a folder: give a file path such as {output / 'model.so'}")
    db = _open_existing(args.db)
    bucketed, model, _ = _compile_buckets(args, db)
    written = export_buckets(bucketed, output, model.onnx_bytes)
    for label, compiled in bucketed.compiled.items():
        n = compiled.counts()
        transferred = (f"{n['transferred']} with the schedules of {bucketed.filled[label]}, "
                       if label in bucketed.filled else "")
        out.print(f"{label}: {len(compiled.sources)} fusion groups: {n['tuned']} tuned, {transferred}{n['default']} "
                  f"default schedule, {n['unscheduled']} unscheduled", highlight=False)
    out.print(bucketed.pad_check, highlight=False)
    if getattr(args, "max_padding", None) and not bucketed.filled:
        why = "the buckets are close enough" if bucketed.pads else "padding is off for this model"
        out.print(f"--max-padding {args.max_padding}: no size added ({why})", highlight=False)
    out.print(f"wrote {len(written)} libraries ({', '.join(p.name for p in written)}) and {output}.json; load them "
              f"with autosched.load_compiled({str(output)!r})", highlight=False)
    return 0


def _run_buckets_command(args: argparse.Namespace) -> int:
    """Each bucket and a size between buckets, timed beside ONNX Runtime (same call kind) and checked."""
    from autosched._tvm import set_num_threads
    from autosched.models.buckets import bucket_label, check_inputs
    from autosched.models.frontends import InputSpec
    from autosched.models.reference import max_relative_error, onnxruntime_session
    from autosched.timing import time_interleaved

    db = _open_existing(args.db)
    bucketed, model, _ = _compile_buckets(args, db)
    session = onnxruntime_session(model, args.threads)
    set_num_threads(args.threads)
    table = Table(title=f"autosched run: {model.name.split('@')[0]}, {args.threads} thread(s), latency of the call "
                        "from Python (median of interleaved rounds)")
    for col in ("sizes", "served by", "autosched", "ONNX Runtime", "autosched vs ORT", "max rel. error"):
        table.add_column(col, justify="left" if col in ("sizes", "served by") else "right")
    worst = 0.0
    all_sizes = sorted(list(bucketed.sizes.values()) + bucketed.between_sizes(), key=lambda s: sorted(s.items()))
    for sizes in all_sizes:
        shapes = bucketed.symbolic.shapes(sizes)
        specs = [InputSpec(s.name, shapes[s.name], s.dtype) for s in model.inputs]
        inputs = check_inputs(specs, args.seed)
        feed = {s.name: x for s, x in zip(specs, inputs, strict=True)}
        want = session.run(None, feed)
        error = max_relative_error(bucketed(*inputs), want)
        worst = max(worst, error)
        times = time_interleaved({"tuned": lambda x=inputs: bucketed(*x), "ort": lambda f=feed: session.run(None, f)},
                                 args.repeat, min_round_s=0.1)
        mine, ort = (float(np.median(times[k])) for k in ("tuned", "ort"))
        table.add_row(bucket_label(sizes), bucketed.route(sizes), _fmt_s(mine), _fmt_s(ort), f"{ort / mine:.2f}x",
                      f"{error:.2e}")
    out.print(table)
    out.print(bucketed.pad_check, highlight=False)
    tolerance = _tolerance(args)
    if worst > tolerance:
        err.print(f"autosched: error: outputs differ from ONNX Runtime's (max rel. error {worst:.2e} > "
                  f"{tolerance:g})", style="red")
        return 1
    out.print(f"outputs match ONNX Runtime at every size (max rel. error {worst:.2e} <= {tolerance:g})")
    return 0
