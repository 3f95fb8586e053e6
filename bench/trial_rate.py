"""Benchmark: how fast the tuner measures trials on one task of a model, and where a trial's time goes
(proposing: sampler, schedule builds for the cost model's pool, features, refits; building; running). Run it
at two commits, same task, same start database, same seed, to compare their search loops.

    python bench/trial_rate.py --model resnet50 --task fused_conv2d16_add9_relu7 --db ~/corpus/resnet50.db
    python bench/trial_rate.py --model bert --task fused_matmul3 --trials 32 --repeat 1

``--model`` is a corpus name (exported with random weights, as bench/corpus.py does) or an .onnx file;
``--db`` a database to start from (copied, never written; a task tuned before proposes as it does late in a
model's run); ``--task`` the start of the task's name. Prints one line per repeat and the medians, writes
bench/results/trial_rate.json (``--name`` renames it). The code measured is the autosched imported: another
commit's through ``PYTHONPATH=path/to/its/tree`` (its commit is in the output).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, machine_info, write_json  # noqa: E402

PARTS = ("search", "build", "measure")


def autosched_commit() -> str:
    """The commit of the autosched package imported (another tree's, under ``PYTHONPATH=that/tree``)."""
    import autosched

    return git_commit(Path(autosched.__file__).parent)


def _onnx(model: str, work: Path) -> Path:
    if model.endswith(".onnx"):
        return Path(model).expanduser()
    from autosched.corpus import catalog as corpus

    return corpus.export_onnx(model, work / f"{model}.onnx", "full")


def one_repeat(task, db_path: Path | None, work: Path, args: argparse.Namespace, repeat: int) -> dict:
    """``--warmup`` trials (workers start, the search is set up), then ``--trials`` timed ones."""
    from autosched.config import TuneConfig
    from autosched.db import open_database
    from autosched.search.optuna_strategy import TIMING_ATTR
    from autosched.session import TuningSession

    path = work / f"repeat{repeat}.db"
    if db_path is not None:
        shutil.copy(db_path, path)
    db = open_database(str(path), create=db_path is None)
    start = db.n_measured(task.key)
    with TuningSession(TuneConfig(n_threads=args.threads, seed=args.seed), task.target_json) as session:
        strategy = session.strategy(task, db)
        session.tune(task, db, strategy=strategy, n_trials=start + args.warmup)
        before = {t.number for t in strategy.study.get_trials(deepcopy=False)}
        began = time.perf_counter()
        result = session.tune(task, db, strategy=strategy, n_trials=start + args.warmup + args.trials)
        wall = time.perf_counter() - began
    parts = dict.fromkeys(PARTS, 0.0)
    for trial in strategy.study.get_trials(deepcopy=False):
        if trial.number not in before and TIMING_ATTR in trial.user_attrs:
            for part in PARTS:
                parts[part] += trial.user_attrs[TIMING_ATTR].get(part, 0.0)
    n = result.n_new
    return {"trials": n, "wall_s": wall, "s_per_trial": wall / max(n, 1), "best_us": result.best.latency_s * 1e6,
            **{f"{part}_s_per_trial": parts[part] / max(n, 1) for part in PARTS}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True, help="the start of the task's name")
    ap.add_argument("--db", default=None, help="a database to start from (copied)")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="trial_rate")
    args = ap.parse_args(argv)
    db_path = Path(args.db).expanduser() if args.db else None
    if db_path is not None and not db_path.is_file():
        raise SystemExit(f"--db {args.db}: no such file; give a tuning database to start from, or leave it out")
    if args.model.endswith(".onnx") and not Path(args.model).expanduser().is_file():
        raise SystemExit(f"--model {args.model}: no such file; give an .onnx file or a corpus model's name")
    fair_environment(args.threads)
    import autosched

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tasks = autosched.extract_model_tasks(str(_onnx(args.model, work)), "llvm", n_threads=args.threads)
        found = [t for t in tasks if t.name.startswith(args.task)]
        if len(found) != 1:
            names = ", ".join(t.name for t in found) or "none"
            raise SystemExit(f"--task {args.task}: matches {names}; give a prefix of exactly one task's name")
        task = found[0]
        rows = []
        for repeat in range(args.repeat):
            rows.append(one_repeat(task, db_path, work, args, repeat))
            r = rows[-1]
            print(f"{task.name}: {r['trials']} trials in {r['wall_s']:.1f} s ({r['s_per_trial']:.3f} s/trial: "
                  + ", ".join(f"{p} {r[f'{p}_s_per_trial']:.3f}" for p in PARTS) + f"), best {r['best_us']:.1f} us",
                  flush=True)
    median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median of {len(rows)}: {median['s_per_trial']:.3f} s/trial, "
          + ", ".join(f"{p} {median[f'{p}_s_per_trial']:.3f}" for p in PARTS) + f"; autosched at {autosched_commit()}")
    path = write_json(args.name, {"machine": machine_info(), "commit": git_commit(), "args": vars(args),
                                  "autosched_commit": autosched_commit(), "task": task.name, "repeats": rows,
                                  "median": median})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
