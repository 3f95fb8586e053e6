"""Dynamic shapes: a Hugging Face GPT-2 with a symbolic sequence length, tuned for a few buckets, timed at every
length beside ONNX Runtime and beside models tuned for single exact lengths.

    python bench/dynamic.py                                   # buckets 16..256, 10 min of tuning, lengths 1..256
    python bench/dynamic.py --time 60 --exact 24 --lengths 1,8,24,200 --out dynamic_quick   # a quick look

The model (GPT-2 LM head, 2 layers, width 256, 256 positions, full vocabulary, random weights) is exported to
ONNX with a symbolic sequence length ``seq`` (torch.onnx, dynamo) and imported from that file, as a user would.
autosched tunes it once for all buckets (``--buckets``, ``tune_model(..., shape_buckets=...)``, ``--time``
seconds for the whole run, setup included), and, for the reference, one model per ``--exact`` length with the
same time per bucket (``--time`` / number of buckets). Every length of ``--lengths`` is then timed, in one
process at ``--threads``: the bucketed model (its own bucket, or padded into the next one), ONNX Runtime's
``session.run`` of the same ONNX file (one session; default settings but the thread count) and, at the
``--exact`` lengths, the model tuned for that length, and (``--max-padding``, default 1.25) the same buckets
compiled with sizes between them whose schedules are refitted from the buckets' (``compile(max_padding=...)``),
each reported on its own: the call a user makes (numpy in, numpy out), in
interleaved rounds with the same timer, medians. Outputs are checked against ONNX Runtime at every length.
Writes bench/results/<out>.json and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, load_now, machine_info, time_interleaved, write_json  # noqa: E402

MAX_ERROR = 1e-3


def export_gpt2(path: Path, positions: int) -> Path:
    """A Hugging Face GPT-2 (2 layers, width 256, random weights) with a symbolic sequence length."""
    import warnings

    from autosched.corpus import catalog as corpus

    torch, tf = corpus.import_library("torch"), corpus.import_library("transformers")
    torch.manual_seed(0)
    config = tf.GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=positions, use_cache=False)
    module = tf.GPT2LMHeadModel(config).eval()
    example = torch.randint(0, config.vocab_size, (1, max(2, positions // 2)))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), str(path), dynamo=True, input_names=["input_ids"],
                          output_names=["logits"], opset_version=18, verbose=False, optimize=True, report=False,
                          external_data=False,
                          dynamic_shapes={"input_ids": {1: torch.export.Dim("seq", min=1, max=positions)}})
    return path


def _tune(onnx_path: Path, db_path: Path, seconds: float, threads: int, seed: int, **kwargs) -> tuple[float, int]:
    """Whole tuning time (import and rewrites included) and the number of tasks."""
    from autosched import TuneConfig
    from autosched.api import tune_model

    start = time.perf_counter()
    config = TuneConfig(n_trials=0, n_threads=threads, seed=seed, time_budget_s=seconds)
    result = tune_model(str(onnx_path), "llvm", str(db_path), config, **kwargs)
    return time.perf_counter() - start, result.n_tasks


TUNING_ARGS = ("buckets", "time", "exact", "threads", "seed")


def _reused_tuning(path: Path, args: argparse.Namespace, work: Path) -> tuple[Path, dict, dict]:
    """The model file, tuning figures and databases of an earlier run (``--reuse-tuning``), checked to match."""
    import json

    earlier = json.loads(path.read_text())
    differ = [k for k in TUNING_ARGS if earlier["args"][k] != getattr(args, k)]
    missing = [f for f in ["gpt2_dynamic.onnx", "buckets.db", *(f"exact_{n}.db" for n in args.exact.split(",") if n)]
               if not (work / f).exists()]
    if differ or missing or Path(earlier["args"]["db_dir"] or "").expanduser() != work:
        raise SystemExit(f"--reuse-tuning {path}: its tuning arguments {differ or ''} or --db-dir differ, or "
                         f"{missing or 'nothing'} is missing from {work}: run it without --reuse-tuning")
    tuning = {k: (v, earlier["tasks"][k]) for k, v in earlier["tuning_s"].items()}
    print(f"tuning reused from {path} (measured {earlier['machine']['time']}): {work}", flush=True)
    return work / "gpt2_dynamic.onnx", tuning, {"json": str(path), "measured": earlier["machine"]["time"],
                                                 "tuning_code_commit": earlier.get("commit")}


def _lengths(text: str, high: int) -> list[int]:
    if text == "all":
        return list(range(1, high + 1))
    return sorted({int(v) for v in text.split(",")})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--buckets", default="1..256", help="--shape-buckets sizes of seq (default: picked for 1..256)")
    p.add_argument("--time", type=float, default=600, help="tuning seconds for all buckets together")
    p.add_argument("--exact", default="24,48,96,192", help="lengths that also get a model tuned for them alone")
    p.add_argument("--lengths", default="all", help="lengths to time: all (1..max bucket) or a comma list")
    p.add_argument("--max-padding", type=float, default=1.25,
                   help="also time the model compiled with sizes between the buckets (compile(max_padding=...)), "
                        "their schedules refitted from the buckets' (0: buckets only)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5, help="interleaved timing rounds per length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="dynamic")
    p.add_argument("--db-dir", help="keep the tuning databases here (default: a temporary folder)")
    p.add_argument("--reuse-tuning", metavar="JSON", help="an earlier run's bench/results JSON with the same tuning "
                   "arguments and --db-dir: its databases and model file are timed again (after a change to compile "
                   "or run) without tuning anew; its tuning figures are copied, and the JSON says so")
    args = p.parse_args()
    fair_environment(args.threads)

    import numpy as np

    from autosched.api import compile as compile_model
    from autosched.deploy.buckets import parse_shape_buckets
    from autosched.deploy.reference import max_relative_error, onnxruntime_session

    buckets = parse_shape_buckets([f"seq={args.buckets}"])
    commit = git_commit()  # the code this run loads
    exact = [int(v) for v in args.exact.split(",") if v]
    work = Path(args.db_dir or tempfile.mkdtemp(prefix="autosched-dynamic-"))
    work.mkdir(parents=True, exist_ok=True)
    per_bucket_s = args.time / len(buckets["seq"])
    if args.reuse_tuning:
        onnx_path, tuning, reused = _reused_tuning(Path(args.reuse_tuning), args, work)
    else:
        onnx_path, reused = export_gpt2(work / "gpt2_dynamic.onnx", max(buckets["seq"])), None
        print(f"buckets seq={list(buckets['seq'])}; tuning {args.time:.0f} s in all, then {per_bucket_s:.0f} s for "
              f"each exact length {exact} ...", flush=True)
        tuning = {"buckets": _tune(onnx_path, work / "buckets.db", args.time, args.threads, args.seed,
                                   shape_buckets=buckets)}
        for n in exact:
            tuning[f"seq={n}"] = _tune(onnx_path, work / f"exact_{n}.db", per_bucket_s, args.threads, args.seed,
                                       shape_buckets={"seq": (n,)})
    bucketed = compile_model(str(onnx_path), "llvm", str(work / "buckets.db"), args.threads, shape_buckets=buckets)
    filled = (compile_model(str(onnx_path), "llvm", str(work / "buckets.db"), args.threads, shape_buckets=buckets,
                            max_padding=args.max_padding) if args.max_padding else None)
    exact_models = {n: compile_model(str(onnx_path), "llvm", str(work / f"exact_{n}.db"), args.threads,
                                     shape_buckets={"seq": (n,)}) for n in exact}
    session = onnxruntime_session(onnx_path.read_bytes(), args.threads)

    from autosched._tvm import set_num_threads

    set_num_threads(args.threads)
    rows = []
    for n in _lengths(args.lengths, max(buckets["seq"])):
        ids = np.random.default_rng(n).integers(0, 50257, (1, n)).astype(np.int64)
        feed = {"input_ids": ids}
        want = session.run(None, feed)
        calls = {"autosched": lambda x=ids: bucketed(x), "onnxruntime": lambda f=feed: session.run(None, f)}
        error = max_relative_error(bucketed(ids), want)
        if filled is not None:
            calls["filled"] = lambda x=ids: filled(x)
            error = max(error, max_relative_error(filled(ids), want))
        if n in exact_models:
            calls["exact"] = lambda x=ids, m=exact_models[n]: m(x)
            error = max(error, max_relative_error(exact_models[n](ids), want))
        times = {k: statistics.median(v) for k, v in time_interleaved(calls, args.repeat, min_round_s=0.05).items()}
        row = {"seq": n, "route": bucketed.route({"seq": n}), "max_rel_error": error, "load": load_now(),
               **{f"{k}_s": v for k, v in times.items()}}
        if filled is not None:
            row["filled_route"] = filled.route({"seq": n})
        rows.append(row)
        exact_text = f", exact-tuned {times['exact'] * 1e3:.3f} ms" if "exact" in times else ""
        filled_text = (f", filled ({row['filled_route']}) {times['filled'] * 1e3:.3f} ms" if "filled" in times
                       else "")
        print(f"seq={n:3d} {row['route']:18s} autosched {times['autosched'] * 1e3:.3f} ms{filled_text}, ONNX Runtime "
              f"{times['onnxruntime'] * 1e3:.3f} ms{exact_text}, err {error:.1e}", flush=True)
    summary = summarize(rows)
    summary_filled = summarize(rows, "filled")
    print_summary(rows, {"buckets only": summary, f"filled (max padding {args.max_padding})": summary_filled},
                  tuning)
    write_json(args.out, {"machine": machine_info(), "commit": commit, "args": vars(args),
                          "buckets": list(buckets["seq"]),
                          "pad_check": bucketed.pad_check, "tuning_s": {k: v[0] for k, v in tuning.items()},
                          "tasks": {k: v[1] for k, v in tuning.items()}, "tuning_reused_from": reused, "rows": rows,
                          "summary": summary,
                          "summary_filled": summary_filled,
                          "filled": filled.filled if filled is not None else {}})
    if any(r["max_rel_error"] > MAX_ERROR for r in rows):
        raise SystemExit(f"outputs differ from ONNX Runtime by more than {MAX_ERROR}")


def summarize(rows: list[dict], contender: str = "autosched") -> dict:
    """Per contender (``autosched``: buckets only; ``filled``: with sizes between them): vs ONNX Runtime at every
    length, and vs the models tuned for single lengths."""
    import numpy as np

    if f"{contender}_s" not in rows[0]:
        return {}
    vs_ort = [r[f"{contender}_s"] / r["onnxruntime_s"] for r in rows]
    vs_exact = {r["seq"]: r[f"{contender}_s"] / r["exact_s"] for r in rows if "exact_s" in r}
    return {"lengths": len(rows), "at_most_ort": sum(v <= 1.0 for v in vs_ort),
            "geomean_vs_ort": float(np.exp(np.mean(np.log(vs_ort)))), "worst_vs_ort": max(vs_ort),
            "worst_vs_ort_seq": rows[int(np.argmax(vs_ort))]["seq"], "vs_exact": vs_exact,
            "worst_vs_exact": max(vs_exact.values(), default=float("nan"))}


def print_summary(rows: list[dict], summaries: dict[str, dict], tuning: dict) -> None:
    has_filled = "filled_s" in rows[0]
    print("\n| seq | served by | autosched ms | " + ("filled: served by | filled ms | " if has_filled else "")
          + "ONNX Runtime ms | autosched / ORT | " + ("filled / ORT | " if has_filled else "")
          + "exact-tuned ms | autosched / exact |" + (" filled / exact |" if has_filled else ""))
    print("|---:|---|---:|" + ("---|---:|" if has_filled else "") + "---:|---:|" + ("---:|" if has_filled else "")
          + "---:|---:|" + ("---:|" if has_filled else ""))
    for r in rows:
        ort, exact = r["onnxruntime_s"], r.get("exact_s")
        cells = [str(r["seq"]), r["route"], f"{r['autosched_s'] * 1e3:.3f}"]
        if has_filled:
            cells += [r["filled_route"], f"{r['filled_s'] * 1e3:.3f}"]
        cells += [f"{ort * 1e3:.3f}", f"{r['autosched_s'] / ort:.2f}"]
        if has_filled:
            cells.append(f"{r['filled_s'] / ort:.2f}")
        cells += [f"{exact * 1e3:.3f}", f"{r['autosched_s'] / exact:.2f}"] if exact else ["-", "-"]
        if has_filled:
            cells.append(f"{r['filled_s'] / exact:.2f}" if exact else "-")
        print("| " + " | ".join(cells) + " |")
    for name, summary in summaries.items():
        if not summary:
            continue
        vs_exact = ", ".join(f"seq={k}: {v:.2f}" for k, v in summary["vs_exact"].items())
        print(f"\n{name}: <= ONNX Runtime at {summary['at_most_ort']} of {summary['lengths']} lengths; geomean "
              f"/ ORT {summary['geomean_vs_ort']:.2f}, worst {summary['worst_vs_ort']:.2f} (seq="
              f"{summary['worst_vs_ort_seq']}); vs a model tuned for the exact length: worst "
              f"{summary['worst_vs_exact']:.2f} ({vs_exact})")
    print("tuning (whole process, s): " + ", ".join(f"{k} {v[0]:.0f} ({v[1]} tasks)" for k, v in tuning.items()))


if __name__ == "__main__":
    main()
