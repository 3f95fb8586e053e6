"""Whole-model benchmark: autosched beside ONNX Runtime and PyTorch, each timed through the call a user makes.

    python bench/models.py                                  # mlp, bert, resnet18; 64 trials per task
    python bench/models.py --models mlp,bert --trials 8     # a quick look
    python bench/models.py --models gpt2-2x256 --out models_gpt2   # Hugging Face GPT-2, 2 layers, width 256
    python bench/models.py --models corpus:gpt2,corpus:vit_b_16 --time 5m   # corpus models, a time budget each
    python bench/models.py --models examples --out models_examples   # every example family, from its shipped log
    python bench/models.py --models bert,gpt2-2x256 --spaces shipped,plain --time 180 --out models_spaces

Each model is built in code with random weights (autosched.corpus.zoo, or autosched.corpus.catalog for
``corpus:NAME``), exported to ONNX and imported from that file, as a user would. It is tuned once, at
``--tune-threads`` (whole tuning time measured, setup included), then compiled and timed at every ``--threads``:
a thread count it was not tuned at borrows the records of the nearest one (counted in the table).
``example:NAME`` (``examples`` for all of them) is the model of ``examples/NAME/``, imported the example's way,
not tuned here: it is compiled from its shipped log, ``tuning_logs/example_NAME.jsonl.gz``, as its user gets it.

Timing, per thread count, in one process: the call a user makes for every contender -- ``compiled(*arrays)``
(numpy in, numpy out), ONNX Runtime's ``session.run``, the PyTorch module and ``torch.compile`` of it
(Inductor, defaults, compiled before the rounds), both under ``no_grad``, and OpenVINO's infer request on the same
ONNX file (its CPU plugin, latency hint, float32; if the ``openvino`` package is installed, else the table says
so) -- in interleaved rounds with the same timer, medians. Beside them, each runtime's own time for the graph,
measured in the same rounds (TVM's timer on the VM function, one run per sample, inputs already tensors; ONNX
Runtime's profiler, ``SequentialExecutor::Execute``, in a second, profiled session): the gap between a call and that
time is what the call path costs. TVM's timer after the rounds, on its own (``autosched_kernels_alone`` in the
JSON), reads lower where the caches are warmer than between other contenders' calls.
Every output is checked against ONNX Runtime's first (OpenVINO's too: a model it cannot read or compute, or whose
outputs differ, is timed without it, and its row says why).
``--spaces shipped,plain`` also tunes each model (same budget, its own database) in the ``plain`` search space --
the shipped one without the additions for memory-bound work, i.e. no fast math and every design MetaSchedule's
rules generate, not only those that fuse the epilogues -- and times both in the same rounds: the whole-model effect
of those additions.
Writes bench/results/<out>.json and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    fair_environment,
    load_now,
    machine_info,
    openvino_version,
    time_callable,
    write_json,
)

MODELS = ("mlp", "bert", "resnet18")
EXAMPLES = [f"example:{n}" for n in ("mlp", "resnet", "mobilenet", "bert", "gpt", "vit", "lstm")]
MAX_ERROR = 1e-3


SPACES = ("shipped", "plain")


def write_plain_search_spaces(folder: Path) -> Path:
    """The shipped search spaces, the CPU one without fast math and without the fused-epilogue design filter (and
    its version moved on, so its records never mix with the shipped space's)."""
    from autosched.paths import data_dir
    from autosched.spaces.settings import load_settings

    folder.mkdir(parents=True, exist_ok=True)
    for path in data_dir("search_spaces").glob("*.toml"):
        text = path.read_text()
        if path.stem == "cpu":
            version = load_settings(path).version
            text = re.sub(r"(?m)^version = \d+$", f"version = {version + 1000}", text, count=1)
            text = re.sub(r"(?ms)^(\[fast_math\]\s*\nops = )\[[^\]]*\]", r"\1[]", text)
            text = re.sub(r"(?m)^fuse_epilogues = true$", "fuse_epilogues = false", text)
        (folder / path.name).write_text(text)
    plain = load_settings(folder / "cpu.toml")
    if plain.fast_math or plain.fuse_epilogues:  # the shipped file's layout changed: fix the rewrite above
        raise SystemExit(f"could not write the plain search space: {folder / 'cpu.toml'} still has fast math "
                         "or fused-epilogue designs")
    return folder


@contextlib.contextmanager
def search_spaces(variant: str, work: Path):
    """Within: autosched tunes and compiles in the ``variant`` search space (``$AUTOSCHED_SEARCH_SPACES``)."""
    from autosched.spaces.settings import SEARCH_SPACES_ENV

    old = os.environ.pop(SEARCH_SPACES_ENV, None)  # "shipped" means the shipped files, whatever the caller set
    if variant != "shipped":
        os.environ[SEARCH_SPACES_ENV] = str(write_plain_search_spaces(work / f"search_spaces_{variant}"))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(SEARCH_SPACES_ENV, None)
        else:
            os.environ[SEARCH_SPACES_ENV] = old


def _gpt2_small_lm():
    """A Hugging Face GPT-2 of 2 layers, width 256, 64 tokens (the full vocabulary), random weights."""
    from autosched.corpus import catalog as corpus

    torch, tf = corpus.import_library("torch"), corpus.import_library("transformers")
    torch.manual_seed(0)
    config = tf.GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=64, use_cache=False)
    return tf.GPT2LMHeadModel(config).eval(), (torch.randint(0, config.vocab_size, (1, 64)),)


def _build(name: str, work: Path):
    """(torch module, torch inputs, ONNX path) of a zoo model, ``corpus:NAME`` or ``gpt2-2x256``."""
    from autosched.corpus import catalog as corpus
    from autosched.corpus import zoo

    if name == "gpt2-2x256":
        module, inputs = _gpt2_small_lm()
        import warnings

        import torch

        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, inputs, str(work / "gpt2.onnx"), dynamo=True, input_names=["input_ids"],
                              output_names=["logits"], opset_version=18, verbose=False, optimize=True, report=False)
        return module, inputs, work / "gpt2.onnx"
    if name.startswith("corpus:"):
        spec = name.removeprefix("corpus:")
        module, inputs = corpus.build_module(spec, "full")
        return module, inputs, corpus.export_onnx(spec, work / f"{spec}.onnx", size="full")
    module, inputs = zoo.build(name)
    return module, inputs, zoo.export_onnx(name, work / f"{name}.onnx")


def _tune(name: str, model, args: argparse.Namespace, work: Path, variant: str = "shipped") -> tuple:
    from autosched import TuneConfig, open_database
    from autosched.graph.passes import extract_tasks, rewrite
    from autosched.scheduler.model_tuning import tune_model_tasks
    from autosched.session import TuningSession
    from autosched.spaces.settings import settings_for
    from autosched.tasks import make_target
    from autosched.tune import Deadline

    start = time.perf_counter()  # the whole tuning, graph rewrites and worker start-up included
    target = make_target("llvm", args.tune_threads)
    tasks = extract_tasks(rewrite(model.mod, target), target, settings_for(target).version)
    suffix = "" if variant == "shipped" else f".{variant}"
    db = open_database(str(work / f"{name.replace(':', '_')}{suffix}.db"))
    config = TuneConfig(n_trials=args.trials, n_threads=args.tune_threads, seed=args.seed,
                        time_budget_s=args.time or 0.0).for_model()
    print(f"[{name}] {len(tasks)} tasks, tuning at {args.tune_threads} thread(s) in the {variant} search space ...",
          flush=True)
    last = [0.0]

    def progress(p) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(f"  {p.n_done}/{p.n_total} trials, est. kernels {p.estimated_s * 1e3:.2f} ms "
                  f"(untuned {p.untuned_s * 1e3:.1f} ms), {p.elapsed_s:.0f} s", flush=True)

    with TuningSession(config, tasks[0].target_json) as session:
        result = tune_model_tasks(session, tasks, db, args.trials, progress, Deadline.after(args.time or 0.0))
    return db, result, time.perf_counter() - start


def _openvino(onnx_bytes: bytes, n: int, feed: dict, want: list) -> tuple:
    """(OpenVINO's call at ``n`` threads on ``feed``, or None; what the times record of it: its error vs ONNX
    Runtime's outputs, or why it is not timed -- not installed, a model it cannot read or compute, wrong outputs)."""
    from autosched.deploy.reference import max_relative_error, openvino_session
    from autosched.graph.passes import failure_reason

    try:
        run = openvino_session(onnx_bytes, n)
        error = max_relative_error(run(feed), want)
    except Exception as err:  # noqa: BLE001 - a peer that cannot run this model is a note, not a crash
        return None, {"openvino_error": failure_reason(err)}
    if not error <= MAX_ERROR:  # a wrong model is never timed nor counted
        return None, {"openvino_error": f"outputs differ from ONNX Runtime's: max relative error {error:.1e}"}
    return (lambda: run(feed)), {"max_rel_error_vs_ort[openvino]": error}


def _time_at(n: int, onnx_bytes: bytes, compiled, untuned, module, compiled_module, torch_inputs, inputs,
             repeat: int, others: dict | None = None, openvino=None) -> dict:
    """Medians of every contender's call at ``n`` threads; ``others``: more autosched builds (name -> model)
    timed in the same rounds; ``openvino``: OpenVINO's call (``_openvino``), if it runs the model."""
    import torch

    from autosched._tvm import set_num_threads
    from autosched.deploy.compare import compare
    from autosched.deploy.reference import onnxruntime_executor_times, onnxruntime_session

    set_num_threads(n)
    torch.set_num_threads(n)
    session, profiled = onnxruntime_session(onnx_bytes, n), onnxruntime_session(onnx_bytes, n, profile=True)
    feed = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}
    calls = {"autosched": lambda: compiled(*inputs), "onnxruntime": lambda: session.run(None, feed),
             "torch": lambda: module(*torch_inputs), "onnxruntime_profiled": lambda: profiled.run(None, feed)}
    if compiled_module is not None:
        calls["torch_compile"] = lambda: compiled_module(*torch_inputs)
    if openvino is not None:
        calls["openvino"] = openvino
    for key, other in (others or {}).items():
        calls[key] = lambda m=other: m(*inputs)
    kernel_timer, kernel_times = compiled.kernel_timer(inputs), []
    calls["autosched_kernels"] = lambda: kernel_times.append(kernel_timer())  # its wall time is not reported
    with torch.no_grad():
        if compiled_module is not None:
            compiled_module(*torch_inputs)  # a new thread count may recompile: not in the timed rounds
        comparison = compare(calls, "onnxruntime", repeat=repeat, min_round_s=0.2, unchecked={"autosched_kernels"})
    times = dict(comparison.median_s)
    times.update({f"untimed[{k}]": why for k, why in comparison.untimed.items()})
    times["autosched_kernels"] = statistics.median(kernel_times)  # TVM's timer, in the rounds of the call
    times["autosched_kernels_alone"] = statistics.median(compiled.time(inputs, n, repeat=repeat, min_repeat_ms=200))
    times["onnxruntime_kernels"] = statistics.median(onnxruntime_executor_times(profiled))
    times["untuned"] = time_callable(lambda: untuned(*inputs), repeat=3, min_repeat_s=0.0)
    times["load"] = load_now()
    return times


def _torch_compiled(module, torch_inputs, row: dict):
    """``torch.compile(module)`` at its defaults (Inductor), compiled once here; None (and why, in the row) where
    it fails."""
    import torch

    start = time.perf_counter()
    try:
        compiled_module = torch.compile(module)
        with torch.no_grad():
            compiled_module(*torch_inputs)
    except Exception as err:  # noqa: BLE001 - a peer that cannot compile this model is a note, not a crash
        row["torch_compile_error"] = " ".join(str(err).splitlines())[:200]
        return None
    row["torch_compile_s"] = time.perf_counter() - start
    return compiled_module


def _example(name: str) -> tuple:
    """An example's model, module, inputs and ONNX bytes, and its shipped tuning log as a read-only database."""
    from autosched.db import open_database
    from autosched.family_example import load_example, prepare

    example, _ = load_example(name.removeprefix("example:"))
    if not example.shipped_log.exists():
        raise SystemExit(f"{name}: no shipped log {example.shipped_log}: tune the example, then autosched export")
    prepared = prepare(example, small=False)
    if prepared.onnx_bytes is None:
        raise SystemExit(f"{name}: the module does not export to ONNX: ONNX Runtime cannot run it")
    return prepared, open_database(str(example.shipped_log), create=False)


def bench_model(name: str, args: argparse.Namespace, threads: list[int], work: Path) -> dict:
    import json

    import torch

    from autosched import load_model
    from autosched.deploy.build import compile_model, compile_unscheduled
    from autosched.deploy.reference import max_relative_error, onnxruntime_session
    from autosched.tasks import make_target

    variants: dict[str, object] = {}  # search-space variant -> its tuning database (--spaces)
    if name.startswith("example:"):  # its shipped log, as a user of the example gets it: no tuning here
        prepared, db = _example(name)
        model, module, torch_inputs, onnx_bytes = (prepared.model, prepared.module, prepared.inputs,
                                                   prepared.onnx_bytes)
        tuned_at = sorted({json.loads(t.target).get("num-cores") for t in db.tasks()})
        row: dict = {"model": name, "tasks": len(db.tasks()), "tuned_tasks": None, "trials": len(db.records()),
                     "tune_s": None, "tune_threads": tuned_at, "shipped_log": True, "threads": {}}
    else:
        module, torch_inputs, onnx_path = _build(name, work)
        model = load_model(str(onnx_path), name=name)
        onnx_bytes = model.onnx_bytes
        with search_spaces("shipped", work):
            db, result, tune_s = _tune(name, model, args, work)
        row = {"model": name, "tasks": len(result.states), "tuned_tasks": result.n_tuned, "trials": result.n_new,
               "tune_s": tune_s, "tune_threads": args.tune_threads, "estimated_kernels_s": result.estimated_s,
               "threads": {}}
        for variant in args.spaces[1:]:  # the same model and budget in another search space, its own database
            with search_spaces(variant, work):
                other_db, other, other_s = _tune(name, model, args, work, variant)
            variants[variant] = other_db
            row.setdefault("spaces", {})[variant] = {"tasks": len(other.states), "tuned_tasks": other.n_tuned,
                                                     "trials": other.n_new, "tune_s": other_s,
                                                     "estimated_kernels_s": other.estimated_s}
    module.eval()
    inputs = [t.numpy() for t in torch_inputs]
    session = onnxruntime_session(onnx_bytes, 1)
    feed = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}
    want = list(session.run(None, feed))
    with torch.no_grad():
        row["torch_max_rel_error_vs_ort"] = max_relative_error([t.numpy() for t in _as_list(module(*torch_inputs))],
                                                               want)
    compiled_module = _torch_compiled(module, torch_inputs, row) if args.torch_compile else None
    for n in threads:
        target = make_target("llvm", n)
        start = time.perf_counter()
        compiled = compile_model(model, target, db)
        compile_s = time.perf_counter() - start
        untuned = compile_unscheduled(model, target)
        others = {}
        for variant, other_db in variants.items():
            with search_spaces(variant, work):
                others[f"autosched[{variant}]"] = compile_model(model, target, other_db)
        errors = {label: max_relative_error(built(*inputs), want) for label, built in
                  {"autosched": compiled, **others}.items()}
        for label, error in errors.items():
            if not error <= MAX_ERROR:  # a wrong model is never timed nor counted
                raise SystemExit(f"{name}: {label}'s outputs differ from ONNX Runtime's (max rel. error {error:.1e})")
        error = errors.pop("autosched")
        openvino, openvino_notes = _openvino(onnx_bytes, n, feed, want)
        times = _time_at(n, onnx_bytes, compiled, untuned, module, compiled_module, torch_inputs, inputs,
                         args.repeat, others, openvino)
        times.update({f"max_rel_error_vs_ort[{label}]": e for label, e in errors.items()}, **openvino_notes)
        times.update(compile_s=compile_s, max_rel_error_vs_ort=error, sources=dict(compiled.counts()),
                     borrowed_groups=len(compiled.borrowed), skipped_records=dict(compiled.skipped))
        row["threads"][str(n)] = times
        shown = {k: v for k, v in times.items()
                 if isinstance(v, float) and k != "load" and not k.startswith("max_rel_error")}
        print(f"  {n} thread(s): " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in shown.items())
              + (f"; OpenVINO not timed: {times['openvino_error']}" if "openvino_error" in times else ""), flush=True)
    return row


def _as_list(out) -> list:
    if hasattr(out, "logits"):
        out = out.logits
    return list(out) if isinstance(out, tuple | list) else [out]


def _ms(t: dict, key: str) -> str:
    return f"{t[key] * 1e3:.3f}" if key in t else "-"


def _best_peer(t: dict) -> float:
    """The faster of ONNX Runtime's and OpenVINO's median call (ONNX Runtime's where OpenVINO did not run)."""
    return min(t["onnxruntime"], t.get("openvino", math.inf))


def _geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def print_table(rows: list[dict], threads: list[int]) -> list[str]:
    with_ov = any("openvino" in r["threads"][str(n)] for r in rows for n in threads)  # else a line says why not
    lines = ["| model | threads | autosched call ms | its kernels ms | gap ms | ORT session.run ms | its kernels ms | "
             "gap ms | PyTorch ms | torch.compile ms | " + ("OpenVINO ms | " if with_ov else "") + "untuned ms | "
             "autosched / ORT | autosched / PyTorch | autosched / torch.compile | "
             + ("autosched / OpenVINO | autosched / best peer | " if with_ov else "")
             + "groups tuned (borrowed) | max rel. err vs ORT | tasks | trials | tune s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|---|---|" * with_ov]
    verdicts = []
    for r in rows:
        for n in threads:
            t = r["threads"][str(n)]
            gap = t["autosched"] - t["autosched_kernels"]
            ort_gap = t["onnxruntime_profiled"] - t["onnxruntime_kernels"]  # both from the profiled session
            vs_compile = f"{t['autosched'] / t['torch_compile']:.2f}" if "torch_compile" in t else "-"
            vs_ov = f"{t['autosched'] / t['openvino']:.2f}" if "openvino" in t else "-"
            ov_ms = _ms(t, "openvino") if "openvino" in t else f"- ({t.get('openvino_error', 'not timed')[:60]})"
            tune_s = "shipped log" if r.get("shipped_log") else f"{r['tune_s']:.0f}"
            lines.append(
                f"| {r['model']} | {n} | {_ms(t, 'autosched')} | {_ms(t, 'autosched_kernels')} | {gap * 1e3:.3f} | "
                f"{_ms(t, 'onnxruntime')} | {_ms(t, 'onnxruntime_kernels')} | {ort_gap * 1e3:.3f} | "
                f"{_ms(t, 'torch')} | {_ms(t, 'torch_compile')} | " + (f"{ov_ms} | " if with_ov else "")
                + f"{t['untuned'] * 1e3:.2f} | "
                f"{t['autosched'] / t['onnxruntime']:.2f} | {t['autosched'] / t['torch']:.2f} | {vs_compile} | "
                + (f"{vs_ov} | {t['autosched'] / _best_peer(t):.2f} | " if with_ov else "")
                + f"{t['sources'].get('tuned', 0)}/{sum(t['sources'].values())} ({t['borrowed_groups']}) | "
                f"{t['max_rel_error_vs_ort']:.1e} | {r['tasks']} | {r['trials']} | {tune_s} |")
            verdicts.append(f"{r['model']} at {n} thread(s): call-path gap {gap * 1e6:.1f} us vs ONNX Runtime's "
                            f"{ort_gap * 1e6:.1f} us ({'<=' if gap <= ort_gap else '>'}); autosched / ORT latency "
                            f"{t['autosched'] / t['onnxruntime']:.2f}"
                            + (f", / OpenVINO {vs_ov}, / best peer {t['autosched'] / _best_peer(t):.2f}"
                               if "openvino" in t else ""))
    for line in lines + verdicts + (means := geomean_lines(rows, threads)):
        print(line)
    return lines + verdicts + means


def geomean_lines(rows: list[dict], threads: list[int]) -> list[str]:
    """Per thread count, the geometric means of autosched / ONNX Runtime, / OpenVINO (over the models it ran) and
    / the best peer; with OpenVINO nowhere timed, one line saying why instead of the last two."""
    lines = []
    for n in threads:
        ts = [r["threads"][str(n)] for r in rows]
        ov = [t for t in ts if "openvino" in t]
        line = (f"geometric means at {n} thread(s) over {len(ts)} models: autosched / ORT "
                f"{_geomean([t['autosched'] / t['onnxruntime'] for t in ts]):.2f}")
        if ov:
            vs_ov, vs_best = (_geomean([t["autosched"] / t["openvino"] for t in ov]),
                              _geomean([t["autosched"] / _best_peer(t) for t in ts]))
            n_ov_best = sum(t["openvino"] < t["onnxruntime"] for t in ov)
            line += (f", autosched / OpenVINO {vs_ov:.2f} (over the {len(ov)} it ran), autosched / best peer "
                     f"{vs_best:.2f} (OpenVINO the faster peer for {n_ov_best})")
        lines.append(line)
    if not any("openvino" in r["threads"][str(n)] for r in rows for n in threads):
        reasons = sorted({r["threads"][str(n)].get("openvino_error", "rows measured before OpenVINO was a contender")
                          for r in rows for n in threads})
        lines.append("OpenVINO not timed: " + "; ".join(reasons))
    return lines


def print_spaces(rows: list[dict], threads: list[int]) -> list[str]:
    """Whole-model latency per search space (--spaces), beside ONNX Runtime, from the same rounds."""
    variants = sorted({v for r in rows for v in r.get("spaces", {})})
    if not variants:
        return []
    lines = ["", "| model | threads | " + " | ".join(f"autosched {v} space ms" for v in ["shipped", *variants])
             + " | ORT ms | " + " | ".join(f"{v} / ORT" for v in ["shipped", *variants])
             + " | " + " | ".join(f"{v} / shipped" for v in variants) + " |",
             "|---|---|" + "---:|" * (2 * len(variants) + 3 + len(variants))]
    for r in rows:
        for n in threads:
            t = r["threads"][str(n)]
            ms = [t["autosched"], *(t[f"autosched[{v}]"] for v in variants)]
            lines.append(f"| {r['model']} | {n} | " + " | ".join(f"{x * 1e3:.3f}" for x in ms)
                         + f" | {t['onnxruntime'] * 1e3:.3f} | "
                         + " | ".join(f"{x / t['onnxruntime']:.2f}" for x in ms) + " | "
                         + " | ".join(f"{x / t['autosched']:.2f}" for x in ms[1:]) + " |")
    for line in lines:
        print(line)
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help="zoo names, or corpus:NAME")
    p.add_argument("--trials", type=int, default=64, help="trials per task (shared by the task scheduler)")
    p.add_argument("--time", type=float, default=None, help="tuning budget per model in seconds (with --trials 0: "
                                                                "no trial limit)")
    p.add_argument("--tune-threads", type=int, default=1)
    p.add_argument("--threads", default="1,2", help="thread counts to compile and time at")
    p.add_argument("--repeat", type=int, default=7, help="interleaved timing rounds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="models")
    p.add_argument("--db-dir", help="keep the tuning databases here (default: a temporary folder)")
    p.add_argument("--spaces", default="shipped", help=f"search spaces to tune each model in, shipped first "
                   f"(of {', '.join(SPACES)}): plain = without fast math and fused-epilogue designs")
    p.add_argument("--no-torch-compile", dest="torch_compile", action="store_false",
                   help="leave torch.compile (Inductor, compiled once per model) out")
    args = p.parse_args()
    args.spaces = [v for v in args.spaces.split(",") if v]
    if args.spaces[:1] != ["shipped"] or not set(args.spaces) <= set(SPACES):
        p.error(f"--spaces: shipped first, then any of {', '.join(SPACES[1:])}")
    threads = [int(t) for t in args.threads.split(",")]
    fair_environment(max(threads))
    rows: list[dict] = []
    wall = time.perf_counter()
    payload = {"machine": machine_info(), "openvino": openvino_version(), "trials_per_task": args.trials,
               "time_budget_s": args.time,
               "command": " ".join(["python", *sys.argv]), "rows": rows}
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        work = Path(args.db_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        names = [m for spec in args.models.split(",") for m in (EXAMPLES if spec == "examples" else [spec])]
        for name in names:
            rows.append(bench_model(name, args, threads, work))
            write_json(args.out, payload)
    payload["summary"] = print_table(rows, threads) + print_spaces(rows, threads)
    payload["wall_s"] = time.perf_counter() - wall
    print(f"wrote {write_json(args.out, payload)} ({payload['wall_s']:.0f} s)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
