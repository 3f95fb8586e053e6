"""CLI commands for whole models: ``tune MODEL``, ``inspect``, ``compile``, ``run``.

Each is the API's pipeline (``autosched.api``) with progress and tables: the model is loaded and rewritten
before a database is opened or a file written, so bad input (missing file, not ONNX, unknown input name, wrong
rank) stops it with nothing written.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autosched import api
from autosched.cli.output import (
    BAR,
    JSON,
    QUIET,
    Steps,
    emit,
    err,
    fmt_rate,
    fmt_s,
    gbps,
    gflops,
    mode_of,
    note,
    of_copy,
    out,
    progress_display,
)
from autosched.cli.parser import config_from_args
from autosched.db import display_name
from autosched.errors import UserInputError

TOLERANCES = {"fp32": 1e-3, "bf16": 2e-2, "fp16": 1e-2, "int8": 5e-2}  # default --tolerance of run, per --precision


def _check_counts(args: argparse.Namespace) -> None:
    for flag, value in (("--threads", args.threads), ("--repeat", getattr(args, "repeat", 1))):
        if value < 1:
            raise UserInputError(f"{flag} must be at least 1")


def _inputs(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    from autosched.graph.frontends import parse_input_shapes

    return parse_input_shapes(args.input)


def _run_target(args: argparse.Namespace):
    """The command's --target at --threads, checked to run here (``run``: its builds are timed here)."""
    from autosched.targets import check_measurable

    _check_counts(args)
    return check_measurable(api.build_target(args.target, args.threads))


def _tolerance(args: argparse.Namespace) -> float:
    return args.tolerance if args.tolerance is not None else TOLERANCES[getattr(args, "precision", "fp32")]


def _mb(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.2f} MiB"


# --- inspect ---------------------------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace) -> int:
    from autosched.graph.passes import extract_tasks, fusion_groups, memory_plan
    from autosched.spaces.settings import settings_for

    target = api.build_target(args.target, args.threads)
    model = api.load_model(args.model, _inputs(args))
    changes = []
    fused = api.rewritten(model, target, args.precision, note, on_pass=changes.append)
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
def cmd_tune_model(args: argparse.Namespace) -> int:
    mode = mode_of(args)
    plan = api.plan_model(args.model, args.target, config_from_args(args), args.shape_buckets, args.precision,
                          _inputs(args), Steps(mode), note)
    config, model, tasks, db_name = plan.config, plan.model, plan.tasks, display_name(args.db)
    total = config.n_trials * len(tasks) or None
    budget = [f"{config.n_trials} trials per task on average ({total} in all, earlier runs in {db_name} included)"
              ] if total else []
    budget += [f"time budget {config.time_budget_s:g} s (baselines included)"] if config.time_budget_s else []
    if mode == BAR and plan.buckets:
        err.print(f"{model.name}: {len(plan.buckets)} buckets, {plan.n_bucket_tasks} bucket tasks -> {len(tasks)} "
                  "distinct tasks", highlight=False)
    if mode == BAR:
        err.print(f"{model.name}: {len(tasks)} tasks from {plan.n_groups} fusion groups, {' and '.join(budget)}")

    def bar():
        return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("est. {task.fields[est]} (untuned {task.fields[untuned]})"),
                        TextColumn("{task.fields[now]}"), TimeElapsedColumn(), TextColumn("{task.fields[left]}"),
                        console=err)

    # the database is opened (and checked) before the bar: a bad one is one line, with no bar above it
    with api.tuning_database(args.db, tasks) as db, progress_display(
            mode, bar, model.name, total, est="?", untuned="?", now="", left="left ~?") as update:
        of_budget = f" of {config.time_budget_s:g}s" if config.time_budget_s else ""

        def on_progress(p) -> None:
            if mode == JSON:
                update(p.n_done, estimated_s=p.estimated_s, untuned_s=p.untuned_s, now=p.task_name,
                       elapsed_s=p.elapsed_s, eta_s=p.eta_s)
                return
            left = f"left ~{p.eta_s:.0f}s{of_budget}" if p.eta_s == p.eta_s else "left ~?"
            update(p.n_done, est=fmt_s(p.estimated_s), untuned=fmt_s(p.untuned_s), now=p.task_name, left=left)

        result = api.tune_planned_model(plan, db, on_progress)
    if mode == JSON:
        emit({"event": "result", "model": model.name, "fusion_groups": plan.n_groups, "tasks": result.n_tasks,
              "tuned": result.n_tuned, "default": result.n_default, "estimated_s": result.estimated_s,
              "untuned_s": result.untuned_s, "new_measurements": result.n_new, "elapsed_s": result.elapsed_s,
              "out_of_time": result.out_of_time, "database": db_name, **_in_model_json(result.in_model)})
    elif mode == QUIET:
        out.print(f"{model.name}: {result.n_tasks} tasks, estimated {fmt_s(result.estimated_s)} per inference "
                  f"(untuned {fmt_s(result.untuned_s)}){_model_latency(result)}; {result.n_new} new measurements; "
                  f"database: {db_name}")
    else:
        _print_model_table(model.name, result, db_name, plan.n_groups, api.copy_bandwidth_for(plan.target))
    return 0


def _print_model_table(name: str, result, db_path: str, n_groups: int, copy_Bps: float | None = None) -> None:
    """The per-task table; ``copy_Bps``: this machine's copy bandwidth at the tuning threads (None: not this CPU),
    which each task's GB/s is shown against."""
    reached = sum(_searched(st) == "searched" for st in result.states)
    counts = (f"{n_groups} fusion groups -> {result.n_tasks} distinct tasks, {result.n_tuned} to search "
              f"({reached} searched in this run), {result.n_default} on default schedules (cheap)"
              + (f", {len(result.unmeasured)} not measured (out of time)" if result.unmeasured else ""))
    table = Table(title=f"autosched tune: {name}: {counts}")
    phase = getattr(result, "in_model", None)  # scheduler.model_tuning.ModelTuneResult.in_model
    in_model = phase.in_model_s if phase is not None else {}
    for col in ("task", "pattern", "weight", "schedule", "trials", "untuned", "best", "GFLOPS", "GB/s", "of copy",
                "speedup", "share of est.", *(["in model"] if in_model else [])):
        table.add_column(col, justify="left" if col in ("task", "pattern", "schedule") else "right")
    total = result.estimated_s or 1.0
    for s in sorted(result.states, key=lambda s: -s.contribution_s):
        speedup = s.untuned_s / s.best_s if s.best_s < float("inf") and s.untuned_s < float("inf") else float("nan")
        rate = gbps(s.task.n_bytes, s.best_s)
        inside = [fmt_s(in_model[s.task.key] / s.task.weight) if s.task.key in in_model else "-"] if in_model else []
        table.add_row(s.task.name, s.task.info.get("pattern", ""), str(s.task.weight),
                      _searched(s), str(s.n_trials), fmt_s(s.untuned_s),
                      fmt_s(s.best_s), gflops(s.task.flops, s.best_s), fmt_rate(rate), of_copy(rate, copy_Bps),
                      f"{speedup:.1f}x" if speedup == speedup else "-", f"{s.contribution_s / total:.0%}", *inside)
    out.print(table)
    stop = "; stopped by the time budget" if result.out_of_time else ""
    out.print(f"{name}: {counts}")
    estimate = (f"{fmt_s(result.estimated_s)} (untuned {fmt_s(result.untuned_s)}, "
                f"{result.untuned_s / result.estimated_s:.1f}x)" if result.estimated_s else
                "none, no task was measured (the time budget was spent before the first: give more --time)")
    out.print(f"estimated kernel time per inference: {estimate}; {result.n_new} new measurements in "
              f"{result.elapsed_s:.0f} s ({result.n_new / max(result.elapsed_s, 1e-9):.1f} per second){stop}; "
              f"database: {db_path}")
    if copy_Bps:
        out.print(f"GB/s: each task's buffers (inputs + outputs) over its best latency; of copy: of this machine's "
                  f"copy bandwidth at these threads, {copy_Bps / 1e9:.1f} GB/s")
    if phase is not None:
        verdict = ("kept the new schedules" if phase.kept_new else "kept the database's schedules" if phase.stored
                   else "out of time to build the new ones: nothing changed")
        out.print(f"model latency, measured (whole inference, TVM's timer): {fmt_s(phase.model_s)}, "
                  f"{phase.model_s / (result.estimated_s or math.nan):.2f}x the estimate; end-to-end phase "
                  f"({phase.elapsed_s:.0f} s): the {phase.n_timed} heaviest tasks' best schedules timed "
                  "inside the model, "
                  f"{len(phase.changed)} tasks run another than their fastest alone; the model as the database had it "
                  f"{fmt_s(phase.before_s)}, with the new schedules {fmt_s(phase.new_s)}: {verdict}")
    _print_unchecked([s.task for s in result.states])


def _model_latency(result) -> str:
    """', model X measured' where the end-to-end phase timed the model, else nothing."""
    return f", model {fmt_s(result.in_model.model_s)} measured" if result.in_model is not None else ""


def _in_model_json(phase) -> dict:
    if phase is None:
        return {}
    return {"model_s": phase.model_s, "model_before_s": phase.before_s, "model_new_s": phase.new_s,
            "in_model_kept_new": phase.kept_new,
            "in_model_changed": phase.changed, "in_model_s": phase.in_model_s}


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
def _warn_if_no_match(compiled, db, target) -> None:
    """Say so when schedules came from another thread count, or when nothing tuned matched this target (and when
    this target's tasks are there with no searched schedule yet: what a short run leaves)."""
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
        from autosched.scheduler.foreign import Adopted

        err.print(f"note: {Adopted(compiled.foreign, Counter()).summary()}, timed against their default and untuned "
                  "builds (tune here to go further)", style="yellow", highlight=False)
    if compiled.skipped:
        err.print("note: records not applied: " + ", ".join(f"{n} {why}" for why, n in compiled.skipped.items())
                  + " (a schedule is only applied to the target and TVM release it was measured on)",
                  style="yellow", highlight=False)
    if compiled.counts()["tuned"] or compiled.counts()["transferred"] or compiled.foreign or not db.tasks():
        return
    others = {json.loads(t.target).get("num-cores") for t in db.tasks()}
    if threads is not None and int(threads) in others:  # measured on their default schedules only (a short run)
        err.print("note: the database has no searched schedule for this target yet (its tasks were measured on their "
                  "default schedules only): every fusion group runs its default schedule; a longer tuning run "
                  "searches them", style="yellow", highlight=False)
        return
    err.print(f"warning: none of the {len(db.tasks())} tasks in the database is for this target "
              f"({target.kind.name}, {threads} threads); it holds tasks for "
              f"{', '.join(str(o) for o in sorted(others, key=str))} thread(s): use the --target of the tuning "
              "run", style="yellow")


def _print_precision(compiled) -> None:
    if compiled.precision_error is not None:
        out.print(f"{compiled.precision}: max relative error against float32 on 3 random inputs: "
                  f"{compiled.precision_error:.2e}", highlight=False)


def _compile(args: argparse.Namespace, db, target, model=None, fused=None):
    """The API's compile of the command's model (or ``model`` with its ``fused`` module), with its progress."""
    steps = Steps(mode_of(args))
    return api.compile(args.model if model is None else model, target, db, shape_buckets=args.shape_buckets,
                       precision=args.precision, max_padding=args.max_padding, inputs=_inputs(args), on_step=steps,
                       on_note=note, on_progress=steps.progress, fused=fused)


LIBRARY_SUFFIXES = (".so", ".dylib", ".dll")  # -o PATH.so: the bare library (and PATH.json), not an artifact


def cmd_compile(args: argparse.Namespace) -> int:
    """``compile -o``: an artifact (a zip file, or a folder where the path ends in / or is one), or with a
    ``.so`` path the bare library and its ``PATH.json``."""
    from autosched.deploy.artifact import is_folder_path, save_artifact

    _check_counts(args)
    output = Path(args.output)
    as_library = output.suffix in LIBRARY_SUFFIXES and not is_folder_path(args.output)
    if args.shape_buckets and not as_library:
        raise UserInputError(f"-o {args.output}: a model with --shape-buckets is written as one library per bucket: "
                             "give a path such as model.so (an artifact holds one build)")
    target = api.build_target(args.target, args.threads)  # another CPU's build is fine: it is not run here
    with api.opened(args.db, read_only=True) as db:
        compiled = _compile(args, db, target)
        for built in getattr(compiled, "compiled", {"": compiled}).values():
            _warn_if_no_match(built, db, target)
        if not as_library:
            save_artifact(compiled, args.output, db, ["autosched", *args.argv], display_name(args.db))
    if args.shape_buckets:
        return _export_buckets(args, compiled, output)
    if as_library:
        compiled.export_library(output)
    wrote = f"{output} and {output}.json" if as_library else (
        f"{args.output} (load it with autosched.load({args.output!r}), time it with autosched run {args.output})")
    out.print(f"{compiled.name}: {len(compiled.sources)} fusion groups: {_schedule_counts(compiled)} (records of "
              f"{display_name(args.db)}); wrote {wrote}", highlight=False)
    _print_precision(compiled)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from autosched.deploy.artifact import looks_like_artifact

    if looks_like_artifact(args.model):
        return _run_artifact(args)
    if not args.db:
        raise UserInputError(f"run {args.model} needs --db DB (the tuning database; an artifact, "
                             "model.autosched, needs none)")
    if args.max_padding is not None and not args.shape_buckets:
        raise UserInputError("--max-padding goes with --shape-buckets (the sizes it fills in between)")
    if args.shape_buckets:
        return _run_buckets_command(args)
    from autosched._tvm import set_num_threads
    from autosched.deploy.compare import compare
    from autosched.deploy.reference import onnxruntime_session, reference_session, run_onnxruntime

    target = _run_target(args)
    model, fused = api.prepare_model(args.model, target, args.precision, _inputs(args), Steps(mode_of(args)), note)
    session = onnxruntime_session(model, args.threads)  # refuses non-ONNX models before any build
    with api.opened(args.db, read_only=True) as db:
        inputs = model.random_inputs(args.seed)
        want = run_onnxruntime(reference_session(model, args.threads, session), model, inputs)
        tuned = _compile(args, db, target, model, fused)
        _warn_if_no_match(tuned, db, target)
    untuned = api.compile_unscheduled(model, target, fused)
    set_num_threads(args.threads)
    feed = {spec.name: x for spec, x in zip(model.inputs, inputs, strict=True)}
    comparison = compare({"tuned": lambda: tuned(*inputs), "untuned": lambda: untuned(*inputs),
                          "ort": lambda: session.run(None, feed)}, want, repeat=args.repeat)
    tuned_s, untuned_s, ort_s = (comparison.median_s[k] for k in ("tuned", "untuned", "ort"))
    worst = comparison.errors["tuned"]
    table = Table(title=f"autosched run: {model.name}, {args.threads} thread(s), latency of the call from Python "
                        "(median of interleaved rounds)")
    for col in ("build", "median latency", "vs untuned", "vs ONNX Runtime", "max rel. error vs ORT"):
        table.add_column(col, justify="left" if col == "build" else "right")
    for label, seconds, error in (("autosched (tuned)", tuned_s, f"{worst:.2e}"),
                                  ("TVM untuned", untuned_s, f"{comparison.errors['untuned']:.2e}"),
                                  ("ONNX Runtime", ort_s, "-")):
        table.add_row(label, fmt_s(seconds), f"{untuned_s / seconds:.1f}x", f"{ort_s / seconds:.2f}x", error)
    out.print(table)
    _print_groups_and_profile(args, tuned, inputs)
    tolerance = _tolerance(args)
    if worst > tolerance:
        err.print(f"autosched: error: tuned outputs differ from ONNX Runtime's (max rel. error {worst:.2e} > "
                  f"{tolerance:g})", style="red")
        return 1
    out.print(f"outputs match ONNX Runtime (max rel. error {worst:.2e} <= {tolerance:g}"
              + (f", {args.precision}" if args.precision != "fp32" else "") + ")")
    return 0


def _schedule_counts(compiled) -> str:
    """'3 tuned, 1 other CPU, 2 default schedule, 0 unscheduled': tuned, default and unscheduled always, the other
    sources (transferred, another CPU's, dlight) where there are any."""
    n = compiled.counts()
    always = {"tuned": "tuned", "default": "default schedule", "unscheduled": "unscheduled"}
    shown = [f"{n[k]} {label}" for k, label in always.items()]
    return ", ".join(shown[:1] + [f"{v} {k}" for k, v in n.items() if k not in always and v] + shown[1:])


def _print_groups_and_profile(args: argparse.Namespace, tuned, inputs: list) -> None:
    """The build's schedule counts (and precision); with --profile N its N slowest kernels."""
    _print_precision(tuned)
    out.print(f"fusion groups: {_schedule_counts(tuned)}", highlight=False)
    if args.profile > 0:
        from autosched.deploy.profiling import profile

        out.print(f"per call (TVM's kernels and the VM's builtins, {args.threads} thread(s), ms per inference):")
        out.print(profile(tuned, inputs).table(top=args.profile), highlight=False)


# --- artifacts (autosched compile -o model.autosched) ----------------------------------------------------------
def _run_artifact(args: argparse.Namespace) -> int:
    """``run model.autosched``: load it (refused on a host or TVM it was not built for), time the call from Python
    and the kernels alone on random inputs, and say where it came from."""
    from autosched._tvm import set_num_threads
    from autosched.deploy.artifact import BUILD_HINT, LIBRARY, load_artifact, read_manifest

    _check_counts(args)
    given = [flag for flag, on in (("--db", args.db), ("--shape-buckets", args.shape_buckets),
                                   ("--input", args.input), ("--tolerance", args.tolerance is not None),
                                   ("--max-padding", args.max_padding is not None)) if on]
    if given:
        raise UserInputError(f"{', '.join(given)}: not for an artifact, which holds its build, input shapes and "
                             f"target (autosched run {args.model} --threads N --repeat N --seed N)")
    manifest = read_manifest(args.model)
    compiled = load_artifact(args.model)
    set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    inputs = [spec.random(rng) for spec in compiled.inputs]
    try:
        outputs = compiled(*inputs)
    except (ValueError, TypeError, RuntimeError, AttributeError, KeyError) as e:  # metadata and library disagree:
        # TVM's shape and dtype checks, an entry function the library lacks
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise UserInputError(f"{args.model}: its library does not run as its metadata ({LIBRARY}.json) says "
                             f"({first}): the artifact is damaged: {BUILD_HINT}") from e
    from autosched.deploy.compare import compare

    medians = compare({"call": lambda: compiled(*inputs)}, [o.copy() for o in outputs], repeat=args.repeat).median_s
    medians["kernels"] = float(np.median(compiled.time(inputs, args.threads, repeat=args.repeat, min_repeat_ms=100)))
    built, target = manifest["versions"], manifest["target"]
    table = Table(title=f"autosched run: {args.model} ({manifest.get('name') or 'model'}), {args.threads} thread(s), "
                        "medians")
    for col in ("build", "latency of the call from Python", "kernels alone (TVM's timer)", "outputs"):
        table.add_column(col, justify="left" if col in ("build", "outputs") else "right")
    shapes = ", ".join(f"{'x'.join(map(str, o.shape))} {o.dtype}" for o in outputs)
    table.add_row("autosched (artifact)", fmt_s(medians["call"]), fmt_s(medians["kernels"]), shapes)
    out.print(table)
    prov = manifest.get("provenance", {})
    out.print(f"built {manifest.get('created_at', '?')} with autosched {built.get('autosched')}, TVM {built.get('tvm')}"
              f", Python {built.get('python')} for {target.get('kind')} {target.get('mcpu') or ''} "
              f"({', '.join(target.get('features') or []) or 'no vector extensions'}); schedules from "
              f"{prov.get('database') or 'no database'}", highlight=False)
    _print_groups_and_profile(args, compiled, inputs)
    if not all(np.isfinite(o).all() for o in outputs if np.issubdtype(o.dtype, np.floating)):
        err.print("autosched: error: the artifact's outputs on random inputs are not all finite", style="red")
        return 1
    return 0


# --- models with symbolic dimensions (--shape-buckets) -------------------------------------------------------------
def _export_buckets(args: argparse.Namespace, bucketed, output: Path) -> int:
    from autosched.deploy.buckets import export_buckets

    written = export_buckets(bucketed, output, bucketed.source.onnx_bytes)
    for label, compiled in bucketed.compiled.items():
        n = compiled.counts()
        transferred = (f"{n['transferred']} with the schedules of {bucketed.filled[label]}, "
                       if label in bucketed.filled else "")
        out.print(f"{label}: {len(compiled.sources)} fusion groups: {n['tuned']} tuned, {transferred}{n['default']} "
                  f"default schedule, {n['unscheduled']} unscheduled", highlight=False)
    out.print(bucketed.pad_check, highlight=False)
    if args.max_padding and not bucketed.filled:
        why = "the buckets are close enough" if bucketed.pads else "padding is off for this model"
        out.print(f"--max-padding {args.max_padding}: no size added ({why})", highlight=False)
    out.print(f"wrote {len(written)} libraries ({', '.join(p.name for p in written)}) and {output}.json; load them "
              f"with autosched.load_compiled({str(output)!r})", highlight=False)
    return 0


def _run_buckets_command(args: argparse.Namespace) -> int:
    """Each bucket and a size between buckets, timed beside ONNX Runtime (same call kind) and checked."""
    from autosched._tvm import set_num_threads
    from autosched.deploy.buckets import bucket_label, check_inputs
    from autosched.deploy.compare import compare
    from autosched.deploy.reference import onnxruntime_session
    from autosched.graph.frontends import InputSpec

    target = _run_target(args)
    with api.opened(args.db, read_only=True) as db:
        bucketed = _compile(args, db, target)
        for compiled in bucketed.compiled.values():
            _warn_if_no_match(compiled, db, target)
    model = bucketed.source
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
        comparison = compare({"tuned": lambda x=inputs: bucketed(*x), "ort": lambda f=feed: session.run(None, f)},
                             "ort", repeat=args.repeat)
        error = comparison.errors["tuned"]
        worst = max(worst, error)
        mine, ort = (comparison.median_s[k] for k in ("tuned", "ort"))
        table.add_row(bucket_label(sizes), bucketed.route(sizes), fmt_s(mine), fmt_s(ort), f"{ort / mine:.2f}x",
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
