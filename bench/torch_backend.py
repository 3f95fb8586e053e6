"""``torch.compile(model, backend=autosched.backend(time=...))`` against eager PyTorch and Inductor (default and
max-autotune), for torchvision ResNet-50 and MobileNetV3, a BERT-base-sized encoder and GPT-2 (configs, random
weights), at 1 and 2 threads.

Per model and thread count, one worker process (fresh: nothing compiled or cached before) times the first call of
each compiler (Inductor's compile, its autotuning; autosched's import, tuning within ``--time``, compile), then
each contender's latency, interleaved (``autosched.timing.time_interleaved``), and checks every output against
eager's. A second worker process then compiles the model again with the same database and budget (and Inductor's
caches of the first): autosched should tune nothing, and each first call is the cost of a rerun of the same script.

    python bench/torch_backend.py                   # the four models, 1 and 2 threads, 5 minutes each
    python bench/torch_backend.py --time 2m --threads 1 --models bert
    python bench/torch_backend.py --small           # tiny models, no tuning: a dry run in seconds

Prints a table; writes bench/results/<--out>.json (default torch_backend), or --json PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, load_now, machine_info, write_json  # noqa: E402

MODELS = ("resnet50", "mobilenet_v3", "bert", "gpt2")
SMALL_MODELS = ("tiny_cnn", "tiny_bert")
PEERS = ("eager", "inductor", "max-autotune", "autosched")
RTOL = 1e-3  # outputs: max difference relative to eager's largest value


# --- the models -------------------------------------------------------------------------------------------------
def build(name: str):
    """(module in eval mode, example inputs, output -> tensor) of a benchmark model, random weights, seed 0."""
    import torch

    from autosched.corpus.catalog import _torchvision

    torch.manual_seed(0)
    image = (torch.randn(1, 3, 224, 224),)
    if name in ("resnet50", "mobilenet_v3", "tiny_cnn"):
        models = _torchvision().models
        if name == "tiny_cnn":
            from torchvision.models.resnet import BasicBlock, ResNet

            model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
            model.layer3, model.layer4 = torch.nn.Identity(), torch.nn.Identity()
            model.fc = torch.nn.Linear(128, 10)
            image = (torch.randn(1, 3, 32, 32),)
        else:
            model = models.resnet50() if name == "resnet50" else models.mobilenet_v3_large()
        return model.eval(), image, lambda out: out
    _torchvision()  # before transformers, which imports it
    import transformers as tf

    if name in ("bert", "tiny_bert"):
        config = tf.BertConfig() if name == "bert" else tf.BertConfig(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
        ids = torch.randint(0, config.vocab_size, (1, 128 if name == "bert" else 32))
        return tf.BertModel(config).eval(), (ids,), lambda out: out.last_hidden_state
    if name == "gpt2":
        config = tf.GPT2Config(use_cache=False)
        ids = torch.randint(0, config.vocab_size, (1, 128))
        return tf.GPT2LMHeadModel(config).eval(), (ids,), lambda out: out.logits
    raise SystemExit(f"unknown model {name!r}: choose from {', '.join(MODELS + SMALL_MODELS)}")


# --- one worker process: one model at one thread count ---------------------------------------------------------
def worker(args: argparse.Namespace) -> dict:
    """First calls and latencies of ``args.peers`` (``reuse``: autosched only, its database tuned already)."""
    import torch

    import autosched
    from autosched.timing import time_interleaved

    torch.set_num_threads(args.threads)
    model, inputs, output = build(args.model)
    with torch.no_grad():
        want = output(model(*inputs))
    row: dict = {"model": args.model, "threads": args.threads, "reuse": args.reuse, "load_before": load_now(),
                 "peers": {}}
    calls = {}
    for peer in args.peers:
        torch._dynamo.reset()
        if peer == "eager":
            compiled = model
        elif peer == "autosched":
            backend = autosched.backend(db=args.db, time=args.time, threads=args.threads, verbose=False)
            compiled = torch.compile(model, backend=backend)
        else:
            compiled = torch.compile(model, mode=None if peer == "inductor" else "max-autotune")
        entry: dict = {}
        started = time.perf_counter()
        try:
            with torch.no_grad():
                got = output(compiled(*inputs))
        except Exception as err:  # a peer that does not run here (max-autotune's CPU support, ...): noted
            row["peers"][peer] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
            continue
        entry["first_call_s"] = time.perf_counter() - started
        scale = max(float(want.abs().max()), 1e-6)
        entry["max_error"] = float((got - want).abs().max()) / scale
        entry["ok"] = entry["max_error"] <= RTOL
        if peer == "autosched":
            entry["graphs"] = [{k: getattr(s, k) for k in ("graph", "mode", "reason", "n_tasks", "n_tuned",
                                                            "n_new_records", "n_records", "sources", "build_s")}
                               for s in backend.stats]
        row["peers"][peer] = entry

        def call(compiled=compiled):
            with torch.no_grad():
                compiled(*inputs)

        calls[peer] = call
    for peer, samples in time_interleaved(calls, repeat=args.repeat, min_round_s=args.min_round_s).items():
        row["peers"][peer]["latency_s"] = sorted(samples)[len(samples) // 2]
    row["load_after"] = load_now()
    return row


def run_worker(model: str, threads: int, peers: list[str], db: str, budget: str, reuse: bool,
               args: argparse.Namespace, inductor_cache: Path) -> dict:
    """One worker process; ``inductor_cache``: Inductor's on-disk caches (fresh for the first process, kept for the
    rerun, as autosched's database is)."""
    command = [sys.executable, __file__, "--worker", "--model", model, "--threads", str(threads), "--db", db,
               "--time", budget, "--peers", *peers, "--repeat", str(args.repeat), "--min-round-s",
               str(args.min_round_s)] + (["--reuse"] if reuse else [])
    started = time.perf_counter()
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    if done.returncode != 0:
        return {"model": model, "threads": threads, "reuse": reuse, "error": done.stderr.strip()[-1500:]}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["process_s"] = time.perf_counter() - started
    return row


# --- the table --------------------------------------------------------------------------------------------------
def table(rows: list[dict]) -> str:
    lines = [f"{'model':<13}{'thr':>4} {'run':<6}" + "".join(f"{p:>24}" for p in PEERS),
             f"{'':<24}" + "".join(f"{'ms / first call s':>24}" for _ in PEERS)]
    for row in rows:
        head = f"{row['model']:<13}{row['threads']:>4} {'rerun' if row['reuse'] else 'first':<6}"
        if "error" in row:
            lines.append(head + " worker failed: " + row["error"].splitlines()[-1][:120])
            continue
        cells = []
        for peer in PEERS:
            entry = row["peers"].get(peer)
            if entry is None:
                cells.append(f"{'-':>24}")
            elif "error" in entry:
                cells.append(f"{'error':>24}")
            else:
                mark = "" if entry["ok"] else " WRONG"
                cells.append(f"{entry['latency_s'] * 1e3:>10.2f} / {entry['first_call_s']:>7.1f}{mark:>4}")
        lines.append(head + "".join(cells))
    return "\n".join(lines)


def autosched_notes(rows: list[dict]) -> str:
    """A line per row: what the autosched backend did (graphs, tasks tuned, records added, schedules used)."""
    lines = []
    for row in rows:
        graphs = row.get("peers", {}).get("autosched", {}).get("graphs")
        if not graphs:
            continue
        said = "; ".join(f"graph {g['graph']}: eager ({g['reason']})" if g["mode"] == "eager" else
                         f"graph {g['graph']}: {g['n_tasks']} tasks, {g['n_tuned']} tuned, {g['n_new_records']} new "
                         f"records, " + ", ".join(f"{n} {k}" for k, n in sorted(g["sources"].items()))
                         for g in graphs)
        lines.append(f"{row['model']} {row['threads']} thr {'rerun' if row['reuse'] else 'first'}: {said}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=None, help=f"default: {' '.join(MODELS)}")
    p.add_argument("--threads", nargs="+", type=int, default=None, help="default: 1 2")
    p.add_argument("--time", default=None, help="autosched's tuning budget per captured graph (default 5m)")
    p.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    p.add_argument("--small", action="store_true", help="tiny models, 1 thread, no tuning: a dry run in seconds")
    p.add_argument("--db-dir", default=None, help="where the tuning databases go (default: a temporary folder)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--min-round-s", type=float, default=0.1)
    p.add_argument("--timeout", type=float, default=3600, help="seconds per worker process")
    p.add_argument("--out", default="torch_backend", help="bench/results/OUT.json")
    p.add_argument("--json", default=None, help="write the results here instead")
    # one worker process
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--reuse", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        fair_environment(args.threads[0])
        args.threads = args.threads[0]
        print(json.dumps(worker(args)))
        return
    models = args.models or (SMALL_MODELS if args.small else MODELS)
    threads = args.threads or ([1] if args.small else [1, 2])
    budget = args.time or ("0" if args.small else "5m")
    if args.small:
        args.repeat, args.min_round_s = min(args.repeat, 3), min(args.min_round_s, 0.02)
        args.peers = [p for p in args.peers if p != "max-autotune"]  # its autotuning takes minutes
    rows = []
    with tempfile.TemporaryDirectory(prefix="autosched-torch-bench-") as tmp:
        folder = Path(args.db_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for model in models:
            for n in threads:
                db, cache = str(folder / f"{model}_t{n}.db"), folder / f"inductor_{model}_t{n}"
                shutil.rmtree(cache, ignore_errors=True)  # Inductor compiles from scratch in the first process
                rows.append(run_worker(model, n, args.peers, db, budget, False, args, cache))
                rows.append(run_worker(model, n, args.peers, db, budget, True, args, cache))
                print(table(rows[-2:]).split("\n", 2)[-1], flush=True)
    print(f"\nautosched after --time {budget} per graph; rerun: a second process, same database\n")
    print(table(rows))
    print("\n" + autosched_notes(rows))
    payload = {"machine": machine_info(), "commit": git_commit(), "args": vars(args), "time": budget, "rows": rows}
    if args.json:
        path = Path(args.json)
        path.write_text(json.dumps(payload, indent=2, default=str))
    else:
        path = write_json(args.out, payload)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
