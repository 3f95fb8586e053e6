"""Which way of timing a candidate alone ranks schedules as the model does: warm, flushed, rotated, or none.

    python bench/conditions.py --db-dir /tmp/corpus-work --models smp_unet_resnet34,bert --threads 2

For each model ``bench/corpus.py --db-dir`` tuned there (``<name>.onnx``, ``<name>.db``): the model built as the
database has it, its kernels timed inside it, and for its heaviest tasks there (as the end-to-end phase picks them,
``autosched/deploy/in_model.py``) up to ``--variants`` distinct schedules each (what the model runs, then the
fastest alone). Each schedule is timed four ways, in one process: alone in each of the search's timing conditions
(``TuneConfig.timing_condition``: "warm", each run right after the last; "flush", its weights and outputs flushed
from the caches before each run; "rotate", its weights and outputs on a new copy each run, the copies through
twice the last-level cache) and inside the model (the VM's hook, as the end-to-end phase times it). Per task: the
Spearman rank correlation of each alone timing with the in-model one, and the regret of choosing by it: the
in-model time of the schedule it ranks first over the fastest in-model time. Writes
bench/results/<out>.json and prints the table; the medians over tasks say which condition the search should use.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, machine_info, write_json  # noqa: E402


def spearman(a: list[float], b: list[float]) -> float | None:
    """Rank correlation of two timings of the same schedules (None for fewer than three)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) if len(a) >= 3 else None


CONDITIONS = ("warm", "flush", "rotate")  # autosched.measure.worker.TIMING_CONDITIONS


def alone_times(session, task, records, condition: str) -> list[float]:
    """Each record's schedule built and timed alone by a runner of the session's kind, in ``condition``."""
    from autosched._tvm import save_json
    from autosched.apply import schedule_from_record
    from autosched.measure.local import LocalRunner
    from autosched.records import Candidate

    cfg = session.config
    cands = [Candidate(task.key, r.params, r.decisions, r.trace_json,
                       mod_json=save_json(schedule_from_record(task.mod, r).mod)) for r in records]
    runner = LocalRunner(cfg.threads, cfg.run_timeout_s, repeat=5, min_repeat_ms=cfg.min_repeat_ms,
                         rtol=cfg.rtol, atol=cfg.atol, cutoff_ratio=None, condition=condition)
    try:
        results = runner.run(session.builder.build(cands), session.prepare_io(task))
    finally:
        runner.close()
    return [r.latency_s for r in results]


def model_rows(name: str, work: Path, threads: int, n_variants: int) -> list[dict]:
    import autosched
    from autosched.config import TuneConfig
    from autosched.db import open_database
    from autosched.deploy import in_model
    from autosched.deploy.build import compile_model
    from autosched.graph.passes import extract_tasks, rewrite
    from autosched.measure import worker
    from autosched.measure.local import isolated
    from autosched.session import TuningSession
    from autosched.spaces.settings import settings_for
    from autosched.tasks import make_target

    model = autosched.load_model(str(work / f"{name}.onnx"))
    target = make_target("llvm", threads)
    fused = rewrite(model.mod, target)
    tasks = {t.key: t for t in extract_tasks(fused, target, settings_for(target).version)}
    db = open_database(str(work / f"{name}.db"), create=False)
    config = TuneConfig(n_threads=threads)
    rows = []
    with TuningSession(config, target) as session, tempfile.TemporaryDirectory() as tmp, \
            isolated(600.0, threads) as call:
        incumbent = compile_model(model, target, db, fused=fused)
        paths = {"model": in_model._export(incumbent, tmp, "model"), "io": f"{tmp}/io.npz"}
        worker.save_io(paths["io"], {f"in{i}": a for i, a in enumerate(model.random_inputs(0))})
        profile = in_model._task_profile(call(worker.profile_model, paths["model"], model.entry, paths["io"], 5),
                                         incumbent.keys)
        variants = {}
        for key in in_model._heaviest(profile):
            own = in_model._before_run(db, tasks[key], float("inf"))  # what the model runs
            found = in_model._variants(db, tasks[key], own, n_variants, float("inf"))
            if len(found) >= 3:
                variants[key] = found
        inside = in_model.variant_times(session, call, tasks, variants, incumbent, fused, paths, tmp)
        for key, in_s in inside.items():
            recs = variants[key]
            alone = {cond: alone_times(session, tasks[key], recs, cond) for cond in CONDITIONS}
            row = {"model": name, "task": tasks[key].name, "weight": tasks[key].weight, "n": len(recs),
                   "in_model_s": in_s, **{f"{cond}_s": t for cond, t in alone.items()},
                   "share": profile[key] / sum(profile.values())}
            best_inside = min(in_s)
            for cond, times in alone.items():
                row[f"{cond}_spearman"] = spearman(times, in_s)
                row[f"{cond}_regret"] = in_s[min(range(len(times)), key=times.__getitem__)] / best_inside
            row["record_regret"] = in_s[min(range(len(recs)), key=lambda i: recs[i].latency_s)] / best_inside
            rows.append(row)
            print(f"  {name} {row['task'][:40]:40s} n={row['n']} share {row['share']:.0%}: Spearman " +
                  " ".join(f"{c} {_f(row[f'{c}_spearman'])}" for c in CONDITIONS) + "; regret " +
                  " ".join(f"{c} {row[f'{c}_regret']:.2f}" for c in CONDITIONS) +
                  f" (as searched {row['record_regret']:.2f})", flush=True)
    db.close()
    return rows


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db-dir", required=True, help="a bench/corpus.py --db-dir (<name>.onnx and <name>.db)")
    p.add_argument("--models", required=True, help="comma-separated corpus names tuned there")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--variants", type=int, default=6, help="schedules per task (at least 3 to rank)")
    p.add_argument("--out", default="")
    args = p.parse_args()
    fair_environment(args.threads)
    rows = [r for name in args.models.split(",") for r in model_rows(name, Path(args.db_dir), args.threads,
                                                                      args.variants)]
    summary = {}
    for cond in CONDITIONS:
        rho = [r[f"{cond}_spearman"] for r in rows if r[f"{cond}_spearman"] is not None]
        summary[cond] = {"median_spearman": statistics.median(rho) if rho else None,
                         "median_regret": statistics.median(r[f"{cond}_regret"] for r in rows) if rows else None,
                         "mean_regret": statistics.fmean(r[f"{cond}_regret"] for r in rows) if rows else None,
                         # the model's time lost by choosing by this condition: share-weighted regret over tasks
                         "weighted_regret": (sum(r["share"] * r[f"{cond}_regret"] for r in rows) /
                                             sum(r["share"] for r in rows)) if rows else None}
    print(f"{len(rows)} tasks, {args.threads} thread(s): " + "; ".join(
        f"{cond}: median Spearman {_f(s['median_spearman'])}, regret median {s['median_regret']:.3f} mean "
        f"{s['mean_regret']:.3f} share-weighted {s['weighted_regret']:.3f}"
        for cond, s in summary.items() if s["median_regret"] is not None))
    write_json(args.out or f"conditions_t{args.threads}", {"rows": rows, "summary": summary, "threads": args.threads,
                                                            "machine": machine_info(), "commit": git_commit()})


if __name__ == "__main__":
    main()
