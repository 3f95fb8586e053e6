"""Tuning logs that travel: what an example family's user on this CPU gets from the shipped log, beside ONNX Runtime.

    python bench/portable_logs.py                          # every family, 3 minutes of tuning per column (d, e)
    python bench/portable_logs.py --families mlp,resnet --time 90s

Per family (``examples/<family>/``, full size, random weights, imported the example's way), at ``--threads``, in
one process, every model compiled for this CPU (``--target llvm``):
  (a) no tuning: no database (every group on its default schedule);
  (b) the shipped log's records of another CPU (``tuning_logs/example_<family>.jsonl.gz``: the CPU it was tuned on,
      e.g. znver5): each group's record timed here against its default and untuned builds at compile time, taken
      where faster (``autosched.scheduler.foreign``);
  (c) the shipped log's records of the AVX2 baseline target (``--baseline``, x86-64-v3), the same way;
  (d) ``--time`` of tuning here, started from the whole shipped log (its records seed each task's search);
  (e) ``--time`` of tuning here from scratch;
and ONNX Runtime (default settings, ``--threads`` intra-op threads). Every contender is timed through the call a
user makes (numpy in, numpy out) in interleaved rounds, medians; outputs checked against ONNX Runtime's first.
One run, not a claim over seeds. Writes bench/results/portable_logs_<cpu>.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, machine_info, time_interleaved, write_json  # noqa: E402

FAMILIES = ("mlp", "resnet", "mobilenet", "bert", "gpt", "vit", "lstm")
BASELINE = "x86-64-v3"  # the AVX2 + FMA baseline of x86-64 (Haswell, Zen 1 and later): the oldest CPU supported
COLUMNS = ("untuned", "other_cpu_log", "baseline_log", "tuned_from_log", "tuned_from_scratch")
MAX_ERROR = 1e-3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from autosched.config import duration_type
    from autosched.family_example import ExampleParser

    p = ExampleParser(description=__doc__.split("\n")[0])
    p.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families (default: all)")
    p.add_argument("--time", type=duration_type(), default=180.0, help="tuning budget of (d) and (e) (3m)")
    p.add_argument("--threads", type=int, default=2, help="threads to tune, serve and time with (2)")
    p.add_argument("--baseline", default=BASELINE, help=f"the mcpu of the shipped baseline records ({BASELINE})")
    p.add_argument("--repeat", type=int, default=7, help="interleaved timing rounds (7)")
    p.add_argument("--out", default=None, help="result name (default portable_logs_<this cpu>)")
    args = p.parse_args(argv)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        p.error(f"unknown families {unknown}: pick from {', '.join(FAMILIES)}")
    return args


def _log_databases(shipped: Path, baseline: str, work: Path) -> tuple[dict[str, object], dict[str, str]]:
    """Databases of the shipped log: all of it, its baseline CPU's records, and its other CPUs' records; and the
    CPU names of each."""
    from autosched.db import open_database
    from autosched.db.transfer import import_jsonl, read_jsonl

    tasks, records, _ = read_jsonl(shipped)
    mcpu = {t.target: json.loads(t.target).get("mcpu", "?") for t in tasks}
    parts = {"all": lambda t: True, "baseline": lambda t: mcpu[t] == baseline,
             "other": lambda t: mcpu[t] != baseline}
    dbs, cpus = {}, {}
    for name, keep in parts.items():
        db = open_database(str(work / f"{shipped.stem}-{name}.db"))
        import_jsonl(db, [t for t in tasks if keep(t.target)], [r for r in records if keep(r.target)])
        dbs[name] = db
        cpus[name] = ", ".join(sorted({mcpu[t.target] for t in tasks if keep(t.target)})) or "none"
    return dbs, cpus


def bench_family(family: str, args: argparse.Namespace, work: Path) -> dict:
    import autosched
    from autosched.db import open_database
    from autosched.deploy.reference import max_relative_error, onnxruntime_session
    from autosched.family_example import load_example, prepare
    from autosched.tasks import make_target

    example, _ = load_example(family)
    prepared = prepare(example, small=False)
    model, arrays = prepared.model, [t.numpy() for t in prepared.inputs]
    target = make_target("llvm", args.threads)
    dbs, cpus = _log_databases(example.shipped_log, args.baseline, work)
    row: dict = {"family": family, "cpus": {"other_cpu_log": cpus["other"], "baseline_log": cpus["baseline"]},
                 "compile_s": {}, "sources": {}, "tune": {}}
    config = autosched.TuneConfig(n_threads=args.threads, time_budget_s=args.time, n_trials=0)
    scratch = open_database(str(work / f"{family}-scratch.db"))
    for column, db in (("tuned_from_log", dbs["all"]), ("tuned_from_scratch", scratch)):
        start = time.perf_counter()
        result = autosched.tune_model(model, target, db=db, config=config)
        row["tune"][column] = {"s": time.perf_counter() - start, "trials": result.n_new, "tasks": result.n_tasks,
                               "tuned": result.n_tuned}
    compiled = {}
    for column, db in (("untuned", None), ("other_cpu_log", dbs["other"]), ("baseline_log", dbs["baseline"]),
                       ("tuned_from_log", dbs["all"]), ("tuned_from_scratch", scratch)):
        if db is not None and not db.tasks():
            continue  # the log has no such records (yet)
        start = time.perf_counter()
        compiled[column] = autosched.compile(model, target, db=db, n_threads=args.threads)
        row["compile_s"][column] = time.perf_counter() - start
        row["sources"][column] = dict(compiled[column].counts())
    session = onnxruntime_session(prepared.onnx_bytes, args.threads) if prepared.onnx_bytes else None
    calls = {column: (lambda c=c: c(*arrays)) for column, c in compiled.items()}
    if session is not None:
        feed = {i.name: x for i, x in zip(session.get_inputs(), arrays, strict=True)}
        want = list(session.run(None, feed))
        row["max_error"] = {k: max_relative_error(c(*arrays), want) for k, c in compiled.items()}
        bad = {k: e for k, e in row["max_error"].items() if not e <= MAX_ERROR}
        if bad:
            raise SystemExit(f"{family}: outputs differ from ONNX Runtime's: {bad}")
        calls["onnxruntime"] = lambda: session.run(None, feed)
    for call in calls.values():  # one untimed call each: a pool that spins after a call is not the next one's cost
        call()
    times = time_interleaved(calls, repeat=args.repeat, min_round_s=0.2)
    row["ms"] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    if "onnxruntime" in row["ms"]:
        row["vs_onnxruntime"] = {k: v / row["ms"]["onnxruntime"] for k, v in row["ms"].items() if k != "onnxruntime"}
    return row


def print_table(rows: list[dict], info: dict, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"latency / ONNX Runtime's on {info['cpu']} ({args.threads} threads); tuning {args.time:.0f} s "
                        "per column (d, e); one run")
    table.add_column("family")
    for head in ("(a) untuned", "(b) other CPU's log", f"(c) {args.baseline} log", "(d) tuned from log",
                 "(e) tuned from scratch", "ONNX Runtime ms"):
        table.add_column(head, justify="right")
    for row in rows:
        ratio = row.get("vs_onnxruntime", {})
        cells = [f"{ratio[c]:.2f}" if c in ratio else "-" for c in COLUMNS]
        cells[1] += f" ({row['cpus']['other_cpu_log']})"
        table.add_row(row["family"], *cells, f"{row['ms'].get('onnxruntime', float('nan')):.2f}")
    Console().print(table)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    fair_environment(args.threads)
    from autosched._tvm import host_cpu, host_features

    info = {**machine_info(), "host_features": host_features(), "commit": git_commit(), "threads": args.threads,
            "time_budget_s": args.time, "baseline": args.baseline}
    rows = []
    with tempfile.TemporaryDirectory(prefix="portable-logs-") as tmp:
        for family in args.families:
            print(f"{family}: ...", flush=True)
            rows.append(bench_family(family, args, Path(tmp)))
            write_json(args.out or f"portable_logs_{host_cpu()}", {"machine": info, "rows": rows})
    print_table(rows, info, args)


if __name__ == "__main__":
    main()
