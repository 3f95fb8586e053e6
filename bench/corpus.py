"""Corpus benchmark: every model of autosched.corpus.catalog through the whole path, beside its peers.

    python bench/corpus.py                                    # every model, full size, 8 trials per task
    python bench/corpus.py --time 600 --models resnet50,bert  # 10 minutes of tuning per model
    python bench/corpus.py --size small --trials 0 --models alexnet,bert    # a quick look (no tuning)
    python bench/corpus.py --time 600 --threads 2 --db-dir ~/corpus-work   # the issue-16 table, resumable
    python bench/corpus.py --time 600 --threads 1 --start-from ~/corpus-work --out corpus_t1_from_t2  # re-tuned
    python bench/corpus.py --retime --threads 2 --db-dir ~/corpus-work --rows-dir bench/results/corpus_rows # re-timed

Each model is built in code with random weights, exported to ONNX (dynamo exporter, opset 18) and imported
from that file, as a user would; a model TVM's ONNX importer cannot read (LSTM, GRU) goes through the
PyTorch path instead, and says so. Then: graph rewrites, task extraction, tuning (``--trials`` per task,
shared by the task scheduler, and/or ``--time`` seconds per model), the build (tuned schedules, default
ones elsewhere) and the run. autosched, ONNX Runtime, PyTorch eager and OpenVINO (its CPU plugin, latency hint,
float32, if the ``openvino`` package is installed) are timed through the same kind of call (numpy or tensors in,
out, one inference), in interleaved rounds, median of ``--repeat`` rounds; every output is checked against ONNX
Runtime's; "paired" is the median over rounds of autosched's round / ONNX Runtime's round in the same round
(steadier on a shared machine). A model that fails at any step is a row with the step and the one-line reason; a
model OpenVINO cannot read or compute (or whose outputs differ from ONNX Runtime's) is timed without it, its row
says why. Writes bench/results/corpus.json and prints the table with the geometric means of autosched / ONNX
Runtime, autosched / OpenVINO and autosched / the best peer (the faster of ONNX Runtime and OpenVINO, per model).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    fair_environment,
    git_commit,
    load_now,
    machine_info,
    openvino_version,
    write_json,
)

MAX_ERROR = 1e-3  # largest relative error vs ONNX Runtime of a model that counts (as bench/models.py)


DEFAULT_TRIALS = 8


def tuning_budget(args: argparse.Namespace, name: str, n_tasks: int) -> tuple[int, float]:
    """THE one place where a model's tuning budget is set: (trials per task, 0 = no trial limit; seconds of
    tuning wall time, baselines included, 0 = no time limit). The task scheduler shares ``trials x n_tasks``
    measurements; ``--time`` alone lifts the trial limit, as ``autosched tune --time`` does."""
    trials = args.trials if args.trials is not None else (0 if args.time else DEFAULT_TRIALS)
    return trials, args.time


class Failed(Exception):
    """A step of one model failed: the row says which step and why (one line)."""

    def __init__(self, step: str, reason: str):
        super().__init__(f"{step}: {reason}")
        self.step, self.reason = step, reason


def _step(row: dict, step: str, fn, *args, **kwargs):
    """Run one step of a model, timing it into ``row`` (``<step>_s``); any failure becomes ``Failed``."""
    from autosched.graph.passes import failure_reason

    start = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    except (KeyboardInterrupt, Failed):
        raise
    except Exception as err:  # whatever the libraries raise: the row records it, the next model runs
        raise Failed(step, failure_reason(err)) from err
    finally:
        row[f"{step}_s"] = time.perf_counter() - start


def _import(name: str, path: Path, module, inputs, row: dict):
    """The ONNX file through autosched's ONNX import; the PyTorch path where the ONNX importer cannot read it."""
    from autosched.errors import AutoschedError
    from autosched.graph.frontends import load_model

    try:
        model = load_model(str(path), name=name)
        row["path"] = "onnx"
        return model, list(model.info.get("fallbacks", []))
    except AutoschedError as err:
        row["path"] = "torch"
        model = load_model(module, example_inputs=inputs, name=name)
        reason = re.sub(r"^model '[^']*' ", "", str(err))
        return model, [f"PyTorch path (ONNX import: {reason})"]


def _onnxruntime(path: Path, feed: dict, n_threads: int):
    """(session, feed in the graph's input order, outputs) for the exported file: ONNX Runtime is the
    reference and the peer on either import path."""
    import onnx

    from autosched.deploy.reference import onnxruntime_session
    from autosched.graph.frontends import InputSpec, Model, onnx_input_dims

    proto = onnx.load(str(path))
    graph_feed = {name: feed[name] for name in onnx_input_dims(proto)}
    specs = [InputSpec(n, a.shape, str(a.dtype)) for n, a in graph_feed.items()]
    reference = Model(path.stem, None, specs, "onnx", proto.SerializeToString())
    session = onnxruntime_session(reference, n_threads)
    return session, graph_feed, session.run(None, graph_feed)


def _openvino(path: Path, feed: dict, want: list, n_threads: int):
    """(OpenVINO's call on the exported file, its error vs ONNX Runtime's outputs); a peer whose outputs differ is
    never timed."""
    from autosched.deploy.reference import max_relative_error, openvino_session

    run = openvino_session(path, n_threads)
    error = max_relative_error(run(feed), want)
    if not error <= MAX_ERROR:
        raise ValueError(f"outputs differ from ONNX Runtime's: max relative error {error:.1e}")
    return run, error


def _peer_openvino(row: dict, path: Path, feed: dict, want: list, n_threads: int):
    """OpenVINO's call, or None with the reason in the row (not installed, cannot read or compute the model, wrong
    outputs): a peer that cannot run a model is a note in its row, and the row goes on without it."""
    try:
        run, row["openvino_max_rel_error_vs_ort"] = _step(row, "openvino_compile", _openvino, path, feed, want,
                                                          n_threads)
    except Failed as failure:
        row["openvino_error"] = failure.reason
        return None
    return run


def _eager(module, inputs) -> list:
    import torch

    with torch.no_grad():
        return [t.numpy() for t in torch.utils._pytree.tree_leaves(module(*inputs)) if isinstance(t, torch.Tensor)]


def _tune(args, name: str, model, fused, tasks, target, db_path: Path, row: dict) -> object | None:
    """Tune the model's tasks into ``db_path`` through the pipeline ``autosched tune`` runs (search, then the
    end-to-end phase: the heaviest tasks' schedules timed inside the model); returns the database."""
    from autosched import TuneConfig, open_database
    from autosched.api import ModelPlan, tune_planned_model
    from autosched.graph.passes import fusion_groups
    from autosched.tune import Deadline

    if args.retime:  # the database tuned by an earlier run, as it is: nothing is measured
        db = open_database(str(db_path))
        row["tasks_tuned"] = _tasks_tuned(db, tasks)
        return db
    trials, seconds = tuning_budget(args, name, len(tasks))
    row["trials_per_task"], row["time_budget_s"] = trials, seconds
    if trials <= 0 and seconds <= 0:  # default schedules only, no measurement at all
        row["tasks_tuned"], row["tune_s"] = 0, 0.0
        return None
    db = open_database(str(db_path))
    start = time.perf_counter()
    config = TuneConfig(n_trials=trials, n_threads=args.threads, seed=args.seed, time_budget_s=seconds,
                        timing_condition="" if args.cache == "default" else args.cache,
                        relatives=args.relatives, in_model=args.in_model).for_model()
    plan = ModelPlan(model, target, tasks, len(fusion_groups(fused)), config, Deadline.after(seconds), fused=fused)
    result = tune_planned_model(plan, db)
    row["tune_s"] = time.perf_counter() - start
    if result.in_model is not None:
        phase = result.in_model
        row.update(in_model_s=phase.elapsed_s, in_model_before_s=phase.before_s, in_model_new_s=phase.new_s,
                   in_model_kept_new=phase.kept_new, in_model_changed=len(phase.changed))
    row["timing_condition"] = config.condition
    row.update(trials=result.n_new, out_of_time=result.out_of_time, tasks_searched=result.n_tuned,
               tasks_default=result.n_default, tasks_unmeasured=len(result.unmeasured))
    row["tasks_tuned"] = _tasks_tuned(db, tasks)
    return db


def estimate_s(db, tasks) -> float:
    """What ``autosched tune`` prints as the estimate: over the tasks, weight x the best latency measured alone."""
    best = [db.best(t.key, t.target_json) for t in tasks]
    return sum(t.weight * b.latency_s for t, b in zip(tasks, best, strict=True) if b is not None)


def _tasks_tuned(db, tasks) -> int:
    """Tasks with a measured schedule (searched or default) beyond the untuned baseline in the database."""
    from autosched.tune import BASELINE_DECISIONS

    return sum(any(r.decisions != BASELINE_DECISIONS for r in db.records(t.key)) for t in tasks)


def paired_ratio(mine: list[float], theirs: list[float]) -> float:
    """Median over rounds of my round's time / theirs in the same round: a slow spell of the shared machine that
    lasts a round or two moves both sides of a pair, so this moves less than the ratio of the two medians."""
    return statistics.median(a / b for a, b in zip(mine, theirs, strict=True))


def peer_ratios(rounds: dict[str, list[float]]) -> dict:
    """autosched over each peer timed in the rounds (ONNX Runtime, and OpenVINO where it ran), medians and paired,
    and over the best peer: the faster of those peers' medians (``best_peer`` names it; ONNX Runtime where OpenVINO
    did not run); paired, each round's faster of them."""
    peers = [p for p in ("onnxruntime", "openvino") if p in rounds]
    median = {k: statistics.median(v) for k, v in rounds.items()}
    best = min(peers, key=median.__getitem__)
    best_rounds = [min(r) for r in zip(*(rounds[p] for p in peers), strict=True)]
    ratios = {"autosched_vs_ort": median["autosched"] / median["onnxruntime"],
              "autosched_vs_ort_paired": paired_ratio(rounds["autosched"], rounds["onnxruntime"]),
              "best_peer": best, "autosched_vs_best_peer": median["autosched"] / median[best],
              "autosched_vs_best_peer_paired": paired_ratio(rounds["autosched"], best_rounds)}
    if "openvino" in rounds:
        ratios.update(autosched_vs_ov=median["autosched"] / median["openvino"],
                      autosched_vs_ov_paired=paired_ratio(rounds["autosched"], rounds["openvino"]))
    return ratios


def bench_model(name: str, args: argparse.Namespace, work: Path) -> dict:
    import torch

    from autosched.corpus import catalog as corpus
    from autosched.deploy.build import compile_model
    from autosched.deploy.compare import compare
    from autosched.deploy.reference import max_relative_error
    from autosched.graph.passes import extract_tasks, fusion_groups, rewrite
    from autosched.spaces.settings import settings_for
    from autosched.tasks import make_target

    entry = corpus.entry(name)
    row: dict = {"model": name, "family": entry.family, "library": entry.library, "size": args.size, "ok": False}
    try:
        module, inputs = _step(row, "build", corpus.build_module, name, args.size, args.seed)
        path = work / f"{name}.onnx"
        if not (args.retime and path.exists()):  # re-timing: the very file that was tuned
            path = _step(row, "export", corpus.export_onnx, name, path, args.size, seed=args.seed)
        model, fallbacks = _step(row, "import", _import, name, path, module, inputs, row)
        target = make_target("llvm", args.threads)
        fused = _step(row, "rewrite", rewrite, model.mod, target, fallbacks=fallbacks, model_name=name)
        row["fallbacks"] = [str(f) for f in fallbacks]
        row["fusion_groups"] = len(fusion_groups(fused))
        tasks = _step(row, "extract", extract_tasks, fused, target, settings_for(target).version)
        row["tasks"] = len(tasks)
        db = _step(row, "tune", _tune, args, name, model, fused, tasks, target, work / f"{name}.db", row)
        row["estimate_s"] = estimate_s(db, tasks) if db is not None else None
        compiled = _step(row, "compile", compile_model, model, target, db, fused=fused)
        row["groups_by_source"] = dict(Counter(compiled.sources.values()))
        row["records_not_applied"] = dict(compiled.skipped)  # records the build could not use, and why
        feed = {n: t.numpy() for n, t in zip(entry.input_names, inputs, strict=True)}
        session, feed, want = _step(row, "onnxruntime", _onnxruntime, path, feed, args.threads)
        arrays = [feed[s.name] for s in model.inputs] if row["path"] == "onnx" else [t.numpy() for t in inputs]
        mine = {"autosched": lambda: compiled(*arrays)}
        row["max_rel_error_vs_ort"] = error = _step(row, "run", compare, mine, want, timed=False).errors["autosched"]
        if not error <= MAX_ERROR:  # a wrong model is never timed nor counted
            raise Failed("check", f"outputs differ from ONNX Runtime's: max relative error {error:.1e}")
        row["torch_max_rel_error_vs_ort"] = max_relative_error(_step(row, "torch", _eager, module, inputs), want)
        openvino = _peer_openvino(row, path, feed, want, args.threads)
        torch.set_num_threads(args.threads)
        calls = {**mine, "onnxruntime": lambda: session.run(None, feed), "torch": lambda: module(*inputs)}
        if openvino is not None:
            calls["openvino"] = lambda: openvino(feed)
        with torch.no_grad():  # every contender's outputs checked again in the comparison, then timed
            rounds = _step(row, "timing", compare, calls, want, repeat=args.repeat, min_round_s=args.min_round_s,
                           refuse_above={"autosched": MAX_ERROR}).rounds_s
        row.update({f"{peer}_s": statistics.median(s) for peer, s in rounds.items()}, load=load_now(), ok=True)
        if row["estimate_s"]:  # the model as the user calls it, over the sum of its kernels as tuned alone
            row["model_vs_estimate"] = row["autosched_s"] / row["estimate_s"]
        row["rounds_s"] = rounds
        row.update(peer_ratios(rounds))
    except Failed as failure:
        row.update(failed_step=failure.step, error=failure.reason)
    return row


TUNING_FIELDS = ("tune_s", "trials", "trials_per_task", "time_budget_s", "out_of_time", "tasks_searched",
                 "tasks_default", "tasks_unmeasured", "commit", "measured_at", "started_from", "timing_condition",
                 "relatives", "time_per_model_s", "cpu", "in_model_s", "in_model_before_s", "in_model_new_s",
                 "in_model_kept_new", "in_model_changed")
TIMING_FIELDS = ("autosched_s", "onnxruntime_s", "torch_s", "autosched_vs_ort", "autosched_vs_ort_paired",
                 "rounds_s", "max_rel_error_vs_ort", "load", "openvino_s", "autosched_vs_ov", "autosched_vs_ov_paired",
                 "best_peer", "autosched_vs_best_peer", "autosched_vs_best_peer_paired",
                 "openvino_max_rel_error_vs_ort", "openvino_error", "model_vs_estimate")


def retime_row(name: str, args: argparse.Namespace, work: Path, done: Path, commit: str) -> dict:
    """A finished row timed again with this code, from the database its tuning left (no tuning): the row keeps
    what its tuning run measured and commit; the new timing replaces the old one, which the row keeps beside it."""
    if not done.exists() or not (work / f"{name}.db").exists():
        raise SystemExit(f"--retime {name}: needs its finished row {done} and its database {work / f'{name}.db'}; "
                         "tune it first (without --retime)")
    old = json.loads(done.read_text())
    print(f"[{name}] re-timing the database tuned at {old.get('commit')} ({old.get('measured_at')}) ...", flush=True)
    new = bench_model(name, args, work)
    if not new["ok"]:  # reported; the row stays as it was, and the table shows it with its first timing
        print(f"[{name}] not re-timed: failed at {new['failed_step']}: {new['error']}", flush=True)
        return {**old, "retime_error": f"{new['failed_step']}: {new['error']}"}
    if (new["tasks"], new["tasks_tuned"]) != (old["tasks"], old["tasks_tuned"]):
        raise SystemExit(f"--retime {name}: tasks found/tuned {new['tasks']}/{new['tasks_tuned']} differ from the "
                         f"row's {old['tasks']}/{old['tasks_tuned']}: the code no longer extracts the tasks it tuned")
    row = {**new, **{k: old[k] for k in TUNING_FIELDS if k in old}}
    row.update(timed_commit=commit, timed_at=time.strftime("%Y-%m-%d %H:%M"),
               first_timing=old.get("first_timing") or {k: old.get(k) for k in (*TIMING_FIELDS, "measured_at")})
    done.write_text(json.dumps(row, default=str))
    print(f"[{name}] autosched {row['autosched_s'] * 1e3:.3f} ms, ONNX Runtime {row['onnxruntime_s'] * 1e3:.3f} ms "
          f"({row['autosched_vs_ort']:.2f}, paired {row['autosched_vs_ort_paired']:.2f}; first timing "
          f"{row['first_timing']['autosched_vs_ort']:.2f}), {_openvino_note(row)}", flush=True)
    return row


def _ms(row: dict, key: str) -> str:
    return f"{row[key] * 1e3:.3f}" if key in row else "-"


def _openvino_note(row: dict) -> str:
    if "openvino_s" in row:
        return f"OpenVINO {row['openvino_s'] * 1e3:.3f} ms ({row['autosched_vs_ov']:.2f})"
    return f"OpenVINO not timed: {row.get('openvino_error', 'row measured before it was a contender')}"


def _geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def print_table(rows: list[dict]) -> str:
    from rich.console import Console

    console = Console(width=220)
    console.print(corpus_table(rows))
    summary = "\n".join(summary_lines(rows))
    console.print(summary, markup=False)  # reasons may hold brackets: pip install 'autosched[bench]'
    return summary


def corpus_table(rows: list[dict]):
    """The table of rows, a ``rich.table.Table``: OpenVINO's columns only where some row timed it."""
    from rich.markup import escape
    from rich.table import Table

    with_ov = any("openvino_s" in r for r in rows)  # else no OpenVINO column, and a line says why
    table = Table(title="autosched corpus: import -> rewrite -> tasks -> tune -> compile -> run (vs ONNX Runtime"
                  + (" and OpenVINO)" if with_ov else ")"))
    columns = ("model", "family", "library", "import/rewrite", "fallbacks", "groups", "tasks found/tuned",
               "extract s", "tune s", "estimate ms", "autosched ms", "model/est.", "ORT ms", "PyTorch ms",
               *(("OpenVINO ms",) if with_ov else ()),
               "autosched/ORT", "paired", *(("autosched/OV", "autosched/best peer") if with_ov else ()),
               "max rel err", "commit")
    for col in columns:
        table.add_column(col, justify="left" if col in ("model", "family", "library", "fallbacks") else "right",
                         overflow="fold", no_wrap=col == "model")
    for r in rows:
        imported = "fusion_groups" in r
        status = f"ok ({r.get('path', '?')})" if imported else f"FAILED at {r.get('failed_step')}"
        fallbacks = r.get("fallbacks", [])
        shown = f"{len(fallbacks)}" + (": " + "; ".join(f[:100] for f in fallbacks) if fallbacks else "")
        tasks = f"{r['tasks']}/{r.get('tasks_tuned', '-')}" if "tasks" in r else "-"
        if r["ok"]:
            paired = f"{r['autosched_vs_ort_paired']:.2f}" if "autosched_vs_ort_paired" in r else "-"
            why = r.get("openvino_error", "not timed")[:80]
            ov = [_ms(r, "openvino_s") if "openvino_s" in r else escape(f"- ({why})")]
            ov_ratios = [f"{r['autosched_vs_ov']:.2f}" if "autosched_vs_ov" in r else "-",
                         f"{r.get('autosched_vs_best_peer', r['autosched_vs_ort']):.2f}"]
            ratio = f"{r['autosched_s'] / r['estimate_s']:.2f}" if r.get("estimate_s") else "-"
            cells = [_ms(r, "estimate_s") if r.get("estimate_s") else "-", _ms(r, "autosched_s"), ratio,
                     _ms(r, "onnxruntime_s"), _ms(r, "torch_s"), *(ov if with_ov else ()),
                     f"{r['autosched_vs_ort']:.2f}", paired, *(ov_ratios if with_ov else ()),
                     f"{r['max_rel_error_vs_ort']:.1e}"]
        else:
            cells = ["-"] * (len(columns) - 11) + [f"{r.get('failed_step')}: {r.get('error', '')}"[:160]]
        table.add_row(r["model"], r["family"], r["library"], status, shown, str(r.get("fusion_groups", "-")), tasks,
                      f"{r['extract_s'] + r.get('rewrite_s', 0):.1f}" if "extract_s" in r else "-",
                      f"{r['tune_s']:.0f}" if "tune_s" in r else "-", *cells,
                      r.get("commit", "-") + (f", timed {r['timed_commit']}" if r.get("timed_commit") else "")
                      + (", NOT re-timed: " + r["retime_error"][:60] if r.get("retime_error") else ""))
    return table


def summary_lines(rows: list[dict]) -> list[str]:
    """The geometric means under the table: autosched / ONNX Runtime, / OpenVINO and / the best peer (with OpenVINO
    nowhere timed, one line saying why instead of the last two)."""
    ran = [r for r in rows if r["ok"]]
    line = (f"geometric mean of autosched / ONNX Runtime latency over the {len(ran)} models that ran: "
            f"{_geomean([r['autosched_vs_ort'] for r in ran]):.2f}" if ran else "no model ran")
    paired = [r["autosched_vs_ort_paired"] for r in ran if "autosched_vs_ort_paired" in r]
    if ran and len(paired) == len(ran):
        line += f" (median of paired rounds: {_geomean(paired):.2f})"
    line += f"; {sum(not r['ok'] for r in rows)} of {len(rows)} failed"
    if any(r.get("started_from") for r in rows):
        line += "; tuned further from the databases of " + ", ".join(sorted({r["started_from"] for r in rows
                                                                         if r.get("started_from")}))
    gaps = [{**r, "model_vs_estimate": r["autosched_s"] / r["estimate_s"]} for r in ran if r.get("estimate_s")]
    if gaps:
        worst = max(gaps, key=lambda r: r["model_vs_estimate"])
        line += (f"\nthe model's latency (autosched's call) / the tuner's estimate (its kernels timed alone): "
                 f"geometric mean "
                 f"{_geomean([r['model_vs_estimate'] for r in gaps]):.2f} over {len(gaps)} models, "
                 f"{sum(r['model_vs_estimate'] <= 1.10 for r in gaps)} within 1.10x, the largest "
                 f"{worst['model_vs_estimate']:.2f} ({worst['model']})")
    ov = [r for r in ran if "openvino_s" in r]
    if not ov:
        reasons = sorted({r.get("openvino_error", "rows measured before OpenVINO was a contender") for r in ran})
        return [line, "OpenVINO not timed: " + ("; ".join(reasons) if reasons else "no model ran")]
    missed = [f"{r['model']} ({r.get('openvino_error', 'measured before OpenVINO was a contender')[:80]})"
              for r in ran if "openvino_s" not in r]
    best = [r.get("autosched_vs_best_peer", r["autosched_vs_ort"]) for r in ran]
    best_paired = [r.get("autosched_vs_best_peer_paired", r.get("autosched_vs_ort_paired")) for r in ran]
    n_ov_best = sum(r.get("best_peer") == "openvino" for r in ran)
    return [line,
            f"geometric mean of autosched / OpenVINO latency over the {len(ov)} models OpenVINO ran: "
            f"{_geomean([r['autosched_vs_ov'] for r in ov]):.2f} (median of paired rounds: "
            f"{_geomean([r['autosched_vs_ov_paired'] for r in ov]):.2f})"
            + (f"; not run by OpenVINO: {', '.join(missed)}" if missed else ""),
            f"geometric mean of autosched / best peer (the faster of ONNX Runtime and OpenVINO per model: OpenVINO "
            f"for {n_ov_best}, ONNX Runtime for {len(ran) - n_ov_best}) over the {len(ran)} models that ran: "
            f"{_geomean(best):.2f}"
            + (f" (median of paired rounds: {_geomean(best_paired):.2f})" if None not in best_paired else "")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="", help="comma-separated corpus names (default: all)")
    p.add_argument("--size", choices=("full", "small"), default="full")
    p.add_argument("--trials", type=int, help=f"trials per task (shared by the task scheduler; default "
                   f"{DEFAULT_TRIALS}, or no limit with --time); 0 and no --time: no tuning, default schedules")
    p.add_argument("--time", type=float, default=0.0, help="tuning seconds per model, baselines included (0: none)")
    p.add_argument("--threads", type=int, default=1, help="threads of autosched's target, ONNX Runtime and PyTorch")
    p.add_argument("--repeat", type=int, default=11, help="interleaved timing rounds (the median is reported)")
    p.add_argument("--min-round-s", type=float, default=0.2, help="each peer runs at least this long per round")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="corpus")
    p.add_argument("--db-dir", help="keep the exported models, tuning databases and finished rows here (default: a "
                   "temporary folder); a run into the same folder reuses the models it finished, each timed in its own "
                   "run, and restarts an unfinished one")
    p.add_argument("--rows-dir", help="keep the finished rows here instead (e.g. bench/results/corpus_rows, committed, "
                   "so that a table too long for one sitting is finished over several), in a folder named after this "
                   "CPU (a table is made of one CPU's rows); each row names the commit and CPU it was measured on")
    p.add_argument("--start-from", help="a --db-dir of an earlier run (e.g. at another thread count): each model's "
                   "tuning database is copied from it and tuned further (its rows say so; not a from-scratch figure)")
    p.add_argument("--cache", choices=("default", "flush", "warm", "rotate"), default="default",
                   help="TuneConfig.timing_condition: its default for models (TuneConfig.for_model), or forced to one "
                   "(a variant: keep its rows out of --rows-dir)")
    p.add_argument("--retime", action="store_true", help="time every finished row again with this code, from the "
                   "database its run left in --db-dir (no tuning; the row keeps its tuning figures and its first "
                   "timing, and names both commits)")
    p.add_argument("--in-model", type=int, default=4, help="TuneConfig.in_model: schedules per heavy task timed "
                   "inside the model at the end of its tuning (0: off, the search's best alone)")
    p.add_argument("--relatives", type=int, default=0, help="tune with TuneConfig.relatives: each task's first round "
                   "starts from the refitted best schedules of up to this many tasks like it (a variant: keep its "
                   "rows out of --rows-dir)")
    args = p.parse_args()
    if args.start_from and args.rows_dir:
        p.error("--start-from rows are not from-scratch rows: keep them out of --rows-dir")
    if args.cache != "default" and args.rows_dir:
        p.error("--cache flush|warm|rotate rows are a variant of the default configuration: keep them out of "
                "--rows-dir")
    if args.relatives and args.rows_dir:
        p.error("--relatives rows are a variant of the default configuration: keep them out of --rows-dir")
    if args.retime and not args.db_dir:
        p.error("--retime needs --db-dir: the databases the rows were tuned into")
    if args.repeat < 5:
        p.error("--repeat must be at least 5")
    fair_environment(args.threads)
    from autosched.corpus import catalog as corpus
    from autosched.errors import UserInputError

    names = [n for n in args.models.split(",") if n] or list(corpus.CORPUS)
    try:
        for n in names:
            corpus.entry(n)
    except UserInputError as err:
        p.error(str(err))
    rows: list[dict] = []
    commit = git_commit()  # the code this run loads (edits made while it runs do not count)
    meta = {"machine": machine_info(), "size": args.size, "trials_per_task": args.trials, "time_per_model_s": args.time,
            "threads": args.threads, "repeat": args.repeat, "openvino": openvino_version(),
            "command": " ".join(["python", *sys.argv])}
    with tempfile.TemporaryDirectory(prefix="autosched-corpus-") as tmp:
        work = Path(args.db_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        # one folder per CPU: ratios measured on different CPUs never make one table
        rows_dir = (Path(args.rows_dir) if args.rows_dir else work) / meta["machine"]["cpu"]
        rows_dir.mkdir(parents=True, exist_ok=True)
        for name in names:
            done = rows_dir / f"{name}.t{args.threads}.{args.size}.row.json"  # finished by an earlier run
            if args.retime:
                rows.append(retime_row(name, args, work, done, commit))
                continue
            if (args.db_dir or args.rows_dir) and done.exists():
                rows.append(json.loads(done.read_text()))
                print(f"[{name}] done earlier: {done}", flush=True)
                continue
            print(f"[{name}] ...", flush=True)
            (work / f"{name}.db").unlink(missing_ok=True)  # an unfinished model starts again, on its full budget
            if args.start_from:  # the model tuned before (another thread count): its records come along
                shutil.copy(Path(args.start_from).expanduser() / f"{name}.db", work / f"{name}.db")
            rows.append({**bench_model(name, args, work), "commit": commit, "cpu": meta["machine"]["cpu"],
                         "time_per_model_s": args.time, "measured_at": time.strftime("%Y-%m-%d %H:%M"),
                         "started_from": args.start_from or None,
                         "relatives": args.relatives})
            done.write_text(json.dumps(rows[-1], default=str))
            r = rows[-1]
            print(f"[{name}] " + (f"autosched {r['autosched_s'] * 1e3:.3f} ms, ONNX Runtime "
                                  f"{r['onnxruntime_s'] * 1e3:.3f} ms, error {r['max_rel_error_vs_ort']:.1e}, "
                                  + _openvino_note(r) if r["ok"] else f"FAILED at {r['failed_step']}: {r['error']}"),
                  flush=True)
            write_json(args.out, {**meta, "rows": rows})
    summary = print_table(rows)
    path = write_json(args.out, {**meta, "rows": rows, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
