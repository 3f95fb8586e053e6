"""Latency against tuning time for one model: autosched and MetaSchedule given the same wall time, in one run.

    python bench/tuning_curve.py --model resnet50 --threads 2 --budget 300 --points 60,150,300

The corpus model is exported to ONNX once. autosched tunes it as a user would (``autosched tune MODEL.onnx --time
BUDGET``, a process of its own: its whole wall time, start-up included, counts). MetaSchedule tunes the same fused
graph (autosched's graph rewrites, so the two searches schedule the same kernels) with ``tune_relax`` at its
defaults (evolutionary search, XGBoost cost model, 64 trials per task per round) in a process of its own, given a
trial budget it cannot finish and stopped when BUDGET seconds have passed. Each point ``t`` of the curve is what
each tuner had measured ``t`` seconds after its process started: autosched's database keeps the records with a
timestamp up to then (each record's ``created_at``), MetaSchedule's record file is copied at that moment. Every
point is then built (tasks without a record: autosched's default schedules, MetaSchedule's TVM's unscheduled
build, as each would ship them) and timed with ONNX Runtime in interleaved rounds, outputs checked against ONNX
Runtime's. Writes bench/results/<out>.json and <out>.png, and prints the table.

    python bench/tuning_curve.py --model resnet50 --threads 2 --resumed --points 60,120,300,600

``--resumed`` (autosched alone): the budget spent as a user who tunes again would, one ``autosched tune --time``
process per point on the same database, each resuming the last one (60 s, then 60 more, then 180, ...); each
ends with the end-to-end phase, which keeps what the database had unless the new schedules make the model faster.
The database is copied after each process, and every copy is compiled and timed in the same interleaved rounds:
the model's latency after each total tuning time, which must never rise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, machine_info, time_interleaved, write_json  # noqa: E402

MS_RECORDS, MS_WORKLOADS = "database_tuning_record.json", "database_workload.json"
MAX_ERROR = 1e-3


def ms_worker(onnx_path: str, work_dir: str, threads: int, max_trials: int) -> None:
    """MetaSchedule's ``tune_relax`` on the model's fused graph (runs until killed or out of trials)."""
    import autosched
    from autosched._tvm import install_fast_inspect, ms
    from autosched.graph.passes import rewrite
    from autosched.tasks import make_target

    target = make_target("llvm", threads)
    fused = rewrite(autosched.load_model(onnx_path).mod, target)
    ms.relax_integration.tune_relax(
        fused, {}, target, work_dir, max_trials_global=max_trials,
        builder=ms.builder.LocalBuilder(max_workers=os.cpu_count(), initializer=install_fast_inspect),
        runner=ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1,
                                                                                min_repeat_ms=100)),
        seed=0)


def run_autosched(onnx_path: Path, work: Path, args: argparse.Namespace) -> tuple[Path, float, float]:
    """``autosched tune`` with the budget; (its database, its start as a Unix time, its wall seconds)."""
    db = work / "autosched.db"
    exe = Path(sys.executable).with_name("autosched")
    start, t0 = time.time(), time.perf_counter()
    subprocess.run([str(exe), "tune", str(onnx_path), "--time", f"{args.budget:g}", "--threads", str(args.threads),
                    "--db", str(db)], check=True, stdout=subprocess.DEVNULL)
    return db, start, time.perf_counter() - t0


def run_resumed(onnx_path: Path, work: Path, args: argparse.Namespace, points: list[float]) -> dict[float, Path]:
    """One ``autosched tune`` process per point on one database, each with the time up to the next point; the
    database copied after each (point -> its copy). Each process's result line (its JSON) goes to the log."""
    db, exe, snapshots, spent = work / "autosched.db", Path(sys.executable).with_name("autosched"), {}, 0.0
    for t in points:
        done = subprocess.run([str(exe), "tune", str(onnx_path), "--time", f"{t - spent:g}", "--threads",
                               str(args.threads), "--db", str(db), "--json"], check=True, capture_output=True,
                              text=True)
        result = [line for line in done.stdout.splitlines() if '"event": "result"' in line]
        print(f"[{args.model}] after {t:g} s of tuning: {result[-1] if result else '(no result line)'}", flush=True)
        spent = t
        snapshots[t] = Path(shutil.copy(db, work / f"autosched_{t:g}.db"))
    return snapshots


def run_metaschedule(onnx_path: Path, work: Path, args: argparse.Namespace, points: list[float]) -> dict[float, Path]:
    """MetaSchedule's process, its record file copied at each point; stopped at the budget."""
    ms_dir, snapshots = work / "ms", {}
    ms_dir.mkdir()
    proc = subprocess.Popen([sys.executable, __file__, "--ms-worker", str(onnx_path), str(ms_dir),
                             str(args.threads), str(args.ms_trials)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    start = time.perf_counter()
    for t in points:
        time.sleep(max(start + t - time.perf_counter(), 0.0))
        snap = work / f"ms_{t:g}"
        snap.mkdir()
        for name in (MS_RECORDS, MS_WORKLOADS):
            if (ms_dir / name).exists():
                shutil.copy(ms_dir / name, snap / name)
        snapshots[t] = snap
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return snapshots


def autosched_until(db_path: Path, until: float, out: Path):
    """A copy of the database with the records measured up to ``until`` (a Unix time)."""
    from autosched.db import open_database

    src, dst = open_database(str(db_path), create=False), open_database(str(out))
    for row in src.tasks():
        dst.commit_task(row)
    dst.commit([r for r in src.records() if r.created_at <= until])
    src.close()
    return dst


def metaschedule_build(model, target, snapshot: Path, fused=None):
    """The fused graph (``model`` through autosched's rewrites, unless given) with MetaSchedule's records up to the
    snapshot applied (others unscheduled), built."""
    from autosched._tvm import ms, relax, tirx
    from autosched.deploy.build import FINISH_PASSES, CompiledModel, _build
    from autosched.graph.passes import rewrite, run_passes
    from autosched.tasks import target_json

    fused = fused if fused is not None else rewrite(model.mod, target)
    n_tuned = 0
    if (snapshot / MS_RECORDS).exists():
        db = ms.database.JSONDatabase(path_workload=str(snapshot / MS_WORKLOADS),
                                      path_tuning_record=str(snapshot / MS_RECORDS))
        with target, db:
            fused = relax.transform.MetaScheduleApplyDatabase()(fused)
        n_tuned = sum(1 for _, f in fused.functions.items()
                      if isinstance(f, tirx.PrimFunc) and int(f.attrs.get("tirx.is_scheduled", 0)))
    final = run_passes(fused, target, FINISH_PASSES, model_name=model.name)
    return CompiledModel(_build(final, target, model.name), model.inputs, target_json(target), {}), n_tuned


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ms-worker":
        ms_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50", help="a corpus model (autosched.corpus.catalog)")
    p.add_argument("--size", choices=("full", "small"), default="full")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget", type=float, default=300.0, help="tuning wall seconds per tuner")
    p.add_argument("--points", default="60,150,300", help="seconds after each tuner's start to build and time")
    p.add_argument("--ms-trials", type=int, default=20000, help="MetaSchedule's trial budget (more than fits)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", default="")
    p.add_argument("--resumed", action="store_true", help="autosched alone, one resumed tune per point on one "
                   "database (what a user who tunes again gets); --budget is the last point")
    args = p.parse_args()
    try:
        points = sorted(float(x) for x in args.points.split(","))
    except ValueError:
        p.error(f"--points: seconds separated by commas, got {args.points!r}")
    if args.resumed:
        args.budget = points[-1]
    if points[-1] > args.budget:
        p.error("every point must be within --budget")
    fair_environment(args.threads)
    import autosched
    from autosched.corpus import catalog as corpus
    from autosched.deploy.reference import max_relative_error, onnxruntime_session
    from autosched.graph.passes import rewrite
    from autosched.tasks import make_target

    work = Path(tempfile.mkdtemp(prefix="tuning-curve-"))
    onnx_path = corpus.export_onnx(args.model, work / f"{args.model}.onnx", size=args.size)
    if args.resumed:
        resumed_curve(Path(onnx_path), work, args, points)
        return
    print(f"[{args.model}] autosched tune --time {args.budget:g} ...", flush=True)
    db_path, as_start, as_wall = run_autosched(Path(onnx_path), work, args)
    print(f"[{args.model}] MetaSchedule tune_relax for {args.budget:g} s ...", flush=True)
    ms_snapshots = run_metaschedule(Path(onnx_path), work, args, points)
    model = autosched.load_model(str(onnx_path))
    target = make_target("llvm", args.threads)
    onnx_bytes = Path(onnx_path).read_bytes()
    session = onnxruntime_session(onnx_bytes, args.threads)
    inputs = model.random_inputs(0)
    feed = {spec.name: x for spec, x in zip(model.inputs, inputs, strict=True)}
    want = session.run(None, feed)
    contenders, notes = {"onnxruntime": lambda: session.run(None, feed)}, {}
    fused = rewrite(model.mod, target)  # the graph every MetaSchedule point is built from
    for t in points:
        db = autosched_until(db_path, as_start + t, work / f"autosched_{t:g}.db")
        compiled = autosched.compile(model, target, db=db)  # as a user compiles
        db.close()
        ms_compiled, n_ms = metaschedule_build(model, target, ms_snapshots[t], fused)
        for name, c in ((f"autosched@{t:g}", compiled), (f"metaschedule@{t:g}", ms_compiled)):
            err = max_relative_error(c(*inputs), want)
            if err > MAX_ERROR:
                notes[name] = f"outputs differ from ONNX Runtime's (max rel. error {err:.1e}): left out"
                continue
            contenders[name] = (lambda c=c: c(*inputs))
        notes[f"metaschedule@{t:g}"] = notes.get(f"metaschedule@{t:g}", f"{n_ms} of the groups scheduled")
    rounds = time_interleaved(contenders, args.repeat)
    ort = statistics.median(rounds["onnxruntime"])
    rows = []
    for t in points:
        row = {"t_s": t}
        for tuner in ("autosched", "metaschedule"):
            key = f"{tuner}@{t:g}"
            if key in rounds:
                row[f"{tuner}_s"] = statistics.median(rounds[key])
                row[f"{tuner}_vs_ort"] = row[f"{tuner}_s"] / ort
            row[f"{tuner}_note"] = notes.get(key, "")
        rows.append(row)
    print(f"{args.model}, {args.threads} thread(s); ONNX Runtime {ort * 1e3:.3f} ms; autosched's whole process "
          f"{as_wall:.0f} s for a {args.budget:g} s budget")
    print("| tuning time | autosched ms | / ORT | MetaSchedule ms | / ORT | MetaSchedule |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = [f"{r['t_s']:g} s"]
        for tuner in ("autosched", "metaschedule"):
            cells += [f"{r[f'{tuner}_s'] * 1e3:.3f}", f"{r[f'{tuner}_vs_ort']:.2f}"] if f"{tuner}_s" in r \
                else ["-", "-"]
        print("| " + " | ".join([*cells, r["metaschedule_note"]]) + " |")
    out = args.out or f"tuning_curve_{args.model}_t{args.threads}"
    write_json(out, {"model": args.model, "size": args.size, "threads": args.threads, "budget_s": args.budget,
                     "onnxruntime_s": ort, "autosched_process_s": as_wall, "rows": rows, "repeat": args.repeat,
                     "machine": machine_info(), "commit": git_commit()})
    _plot(rows, ort, Path(__file__).resolve().parent / "results" / f"{out}.png", args)
    shutil.rmtree(work, ignore_errors=True)


def resumed_curve(onnx_path: Path, work: Path, args: argparse.Namespace, points: list[float]) -> None:
    """``--resumed``: every snapshot compiled as a user compiles it and timed with ONNX Runtime in one set of
    interleaved rounds, outputs checked; the table says whether the latency ever rose."""
    import autosched
    from autosched.db import open_database
    from autosched.deploy.reference import max_relative_error, onnxruntime_session
    from autosched.tasks import make_target

    snapshots = run_resumed(onnx_path, work, args, points)
    model = autosched.load_model(str(onnx_path))
    target = make_target("llvm", args.threads)
    session = onnxruntime_session(onnx_path.read_bytes(), args.threads)
    inputs = model.random_inputs(0)
    feed = {spec.name: x for spec, x in zip(model.inputs, inputs, strict=True)}
    want = session.run(None, feed)
    contenders, errors, kernels = {"onnxruntime": lambda: session.run(None, feed)}, {}, {}
    for t, path in snapshots.items():
        with open_database(str(path), create=False) as db:
            compiled = autosched.compile(model, target, db=db)
        errors[t] = max_relative_error(compiled(*inputs), want)
        if errors[t] <= MAX_ERROR:
            contenders[f"autosched@{t:g}"] = (lambda c=compiled: c(*inputs))
            kernels[t] = statistics.median(compiled.time(inputs, args.threads, repeat=args.repeat))
    rounds = time_interleaved(contenders, args.repeat)
    ort = statistics.median(rounds["onnxruntime"])
    rows = [{"t_s": t, "autosched_s": statistics.median(rounds[f"autosched@{t:g}"]), "kernels_s": kernels[t],
             "max_rel_error": errors[t]} for t in points if f"autosched@{t:g}" in rounds]
    for r in rows:
        r["autosched_vs_ort"] = r["autosched_s"] / ort
    rose = [f"{b['t_s']:g} s" for a, b in zip(rows[:-1], rows[1:], strict=True)
            if b["autosched_s"] > a["autosched_s"] * 1.02]
    print(f"{args.model}, {args.threads} thread(s), resumed runs; ONNX Runtime {ort * 1e3:.3f} ms")
    print("| tuning time (total) | autosched ms (call) | kernels ms (TVM's timer) | / ORT | max rel. error |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['t_s']:g} s | {r['autosched_s'] * 1e3:.3f} | {r['kernels_s'] * 1e3:.3f} | "
              f"{r['autosched_vs_ort']:.2f} | {r['max_rel_error']:.1e} |")
    print("latency rose (by more than 2 %) at: " + (", ".join(rose) if rose else "never"))
    out = args.out or f"tuning_curve_resumed_{args.model}_t{args.threads}"
    write_json(out, {"model": args.model, "size": args.size, "threads": args.threads, "resumed": True,
                     "points_s": points, "onnxruntime_s": ort, "rows": rows, "rose_at": rose, "repeat": args.repeat,
                     "machine": machine_info(), "commit": git_commit()})
    shutil.rmtree(work, ignore_errors=True)


def _plot(rows: list[dict], ort: float, path: Path, args: argparse.Namespace) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for tuner, style in (("autosched", "o-"), ("metaschedule", "s--")):
        pts = [(r["t_s"], r[f"{tuner}_s"] * 1e3) for r in rows if f"{tuner}_s" in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=tuner)
    ax.axhline(ort * 1e3, color="gray", linestyle=":", label="ONNX Runtime")
    ax.set_xlabel("tuning wall time (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{args.model}, {args.threads} thread(s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
