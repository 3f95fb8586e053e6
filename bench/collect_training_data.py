"""Collect the measurements the shipped cost model is trained on, then train it.

    python bench/collect_training_data.py            # ~10 min on 2 cores; rebuilds cost_models/llvm

Tunes catalog workloads at training shapes (none of them is a shape of bench/kernels.py or
bench/cost_model.py, which measure the model on unseen shapes) without a cost model, 64 trials each,
1 thread, into tuning_logs/cost_model_training.db; exports it as tuning_logs/cost_model_training.jsonl.gz
(shipped) and trains cost_models/llvm from it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from common import machine_info  # noqa: E402

TRAINING_SHAPES = {
    "matmul": [(256, 256, 256), (1024, 256, 512), (128, 1024, 256)],
    "batch_matmul": [(8, 64, 64, 64), (4, 256, 128, 64)],
    "dense": [(64, 1024, 512), (256, 512, 1024), (16, 3072, 768)],
    "conv2d": [(1, 32, 28, 28, 64, 3, 3), (1, 128, 14, 14, 128, 3, 3), (1, 64, 56, 56, 128, 1, 1)],
    "depthwise_conv2d": [(1, 64, 112, 112, 3, 3), (1, 256, 28, 28, 3, 3)],
    "softmax": [(256, 512), (64, 2048)],
    "layer_norm": [(256, 512), (64, 2048)],
}
DB = Path("tuning_logs") / "cost_model_training.db"  # relative to ROOT (the commands run there)
EXPORT = Path("tuning_logs") / "cost_model_training.jsonl.gz"
MODEL = Path("cost_models") / "llvm"
AUTOSCHED = [sys.executable, "-m", "autosched.cli"]  # works without the venv on PATH


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    os.chdir(ROOT)
    DB.unlink(missing_ok=True)  # a rebuild starts from scratch (tuning resumes, so an old database adds nothing)
    for op, shapes in TRAINING_SHAPES.items():
        for shape in shapes:
            cmd = [*AUTOSCHED, "tune", "--op", op, "--shape", ",".join(map(str, shape)), "--trials",
                   str(args.trials), "--threads", str(args.threads), "--db", str(DB), "--cost-model", "none",
                   "--no-baseline"]
            print("autosched", " ".join(cmd[len(AUTOSCHED):]), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*AUTOSCHED, "export", "--db", str(DB), "-o", str(EXPORT)], check=True)
    subprocess.run([*AUTOSCHED, "train-cost-model", "--db", str(DB), "-o", str(MODEL)], check=True)
    meta_path = MODEL / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["command"] = f"python bench/collect_training_data.py  (then: {meta['command']})"
    meta["rebuild_from_shipped_data"] = (f"autosched import {EXPORT} --db /tmp/t.db && "
                                         f"autosched train-cost-model --db /tmp/t.db -o {MODEL}")
    info = machine_info()
    meta["trained_on"]["machine"] = (f"{info['cpu']} ({info['machine']}), {args.threads} thread(s), "
                                     f"{args.trials} trials per task without a cost model")
    meta["trained_on"]["leave_one_task_out_pairwise_accuracy"] = leave_one_task_out(str(DB))
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")


def leave_one_task_out(db_path: str) -> dict:
    """Pairwise accuracy on each task of a model trained on all the others: how well it transfers."""
    import numpy as np

    from autosched.cost.training import Dataset, dataset_from_databases, pairwise_accuracy, train

    data = dataset_from_databases([db_path])
    accs = []
    for g in np.unique(data.groups):
        rest = data.groups != g
        model = train(Dataset(data.X[rest], data.y[rest], data.groups[rest], target_family=data.target_family))
        accs.append(pairwise_accuracy(model.predict(data.X[~rest]), data.y[~rest], data.groups[~rest]))
    return {"median": round(float(np.median(accs)), 3), "mean": round(float(np.mean(accs)), 3)}


if __name__ == "__main__":
    sys.exit(main())
