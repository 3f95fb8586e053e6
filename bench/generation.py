"""LLM generation through ``torch.compile``: tokens per second of greedy ``generate`` (issue 63).

    python bench/generation.py                       # llama and gpt2 from configs, prompt 16, 32 new tokens, 2 threads
    python bench/generation.py --time 20 --models llama

Models are Hugging Face configs with random weights (a Llama-style model: 2 layers, width 256, grouped-query
attention; a GPT-2-style one: 2 layers, width 256), batch 1. Contenders, each on a fresh copy of the model with
``model.forward`` compiled: eager PyTorch, Inductor (``torch.compile`` default and ``dynamic=True``) and autosched
(``autosched.backend(time=--time)``, one database per model) with HF's dynamic KV cache and with its static one
(``cache_implementation="static"``, HF's recipe for torch.compile). Per contender: the first ``generate``
(compiling, tuning and builds included), a second one, the steady state (the best of ``--repeat`` more; tokens per
second, prefill included), the builds (autosched) made during the second ``generate``, and whether the tokens equal
eager's. Writes bench/results/generation_<cpu>.json and .log; prints the table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, load_now, machine_info, write_json  # noqa: E402

CONTENDERS = ("eager", "eager-static", "inductor", "inductor-dynamic", "autosched", "autosched-static")


def build(name: str):
    """A model from a config, random weights, seed 0."""
    import torch

    from autosched.corpus.catalog import _torchvision

    _torchvision()  # before transformers, which imports it
    import transformers as tf

    torch.manual_seed(0)
    if name == "llama":
        config = tf.LlamaConfig(
            num_hidden_layers=2,
            hidden_size=256,
            intermediate_size=512,
            num_attention_heads=8,
            num_key_value_heads=2,
            vocab_size=1000,
            max_position_embeddings=256,
        )
        return tf.LlamaForCausalLM(config).eval()
    if name == "gpt2":
        config = tf.GPT2Config(n_layer=2, n_embd=256, n_head=8, vocab_size=1000, n_positions=256)
        return tf.GPT2LMHeadModel(config).eval()
    raise SystemExit(f"unknown model {name!r}: llama or gpt2")


def run(name: str, contender: str, ids, want, args: argparse.Namespace, db: str) -> dict:
    import torch

    import autosched

    torch._dynamo.reset()
    model = build(name)
    options = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "do_sample": False}
    if contender.endswith("-static"):
        options["cache_implementation"] = "static"
    backend = None
    if contender.startswith("inductor"):
        model.forward = torch.compile(model.forward, dynamic=True if contender.endswith("dynamic") else None)
    elif contender.startswith("autosched"):
        backend = autosched.backend(db=db, time=args.time, threads=args.threads)
        model.forward = torch.compile(model.forward, backend=backend)
    row: dict = {"model": name, "contender": contender}

    def generate() -> tuple[float, object]:
        started = time.perf_counter()
        out = model.generate(ids, **options)
        return time.perf_counter() - started, out

    try:
        with torch.no_grad():
            row["first_s"], first = generate()
            builds = backend.profile.builds if backend else 0
            row["second_s"], second = generate()
            row["builds_second"] = backend.profile.builds - builds if backend else None
            best = min(generate()[0] for _ in range(args.repeat))
    except Exception as err:  # one contender failing does not stop the others
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        return row
    row["steady_tokens_per_s"] = args.new_tokens / best
    row["equal_to_eager"] = bool(want is None or (torch.equal(first, want) and torch.equal(second, want)))
    if backend is not None:
        row["graphs_built"] = len(backend.stats)
        row["eager_graphs"] = sum(s.mode == "eager" for s in backend.stats)
        row["tuning_s"] = backend.spent_s
        row["profile"] = str(backend.profile)
    return row, first if contender == "eager" else None


def print_table(rows: list[dict]) -> list[str]:
    head = f"{'model':6} {'contender':17} {'first s':>8} {'second s':>9} {'tok/s':>8} {'builds 2nd':>10} {'= eager':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:6} {r['contender']:17} failed: {r['error']}")
            continue
        b = "" if r.get("builds_second") is None else str(r["builds_second"])
        lines.append(
            f"{r['model']:6} {r['contender']:17} {r['first_s']:8.2f} {r['second_s']:9.3f} "
            f"{r['steady_tokens_per_s']:8.1f} {b:>10} {str(r['equal_to_eager']):>7}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="llama,gpt2")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--time", default="60s", help="autosched's tuning budget per model (the backend's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--note", default="", help="a line for the log (e.g. the machine was loaded)")
    args = parser.parse_args()
    fair_environment(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    info = machine_info()
    rows, work = [], Path(tempfile.mkdtemp(prefix="bench_generation_"))
    load_before = load_now()
    for name in args.models.split(","):
        ids = torch.randint(0, 1000, (1, args.prompt), generator=torch.Generator().manual_seed(0))
        want = None
        for contender in args.contenders.split(","):
            result = run(name, contender, ids, want, args, str(work / f"{name}.db"))
            row, tokens = result if isinstance(result, tuple) else (result, None)
            if contender == "eager":
                want = tokens
            rows.append(row)
            print(print_table([row])[-1], flush=True)
    lines = print_table(rows)
    cpu = info["cpu"].split()[0] if info.get("cpu") else "cpu"
    payload = {
        "machine": info,
        "commit": git_commit(),
        "args": vars(args),
        "load_before": load_before,
        "load_after": load_now(),
        "rows": rows,
    }
    path = write_json(f"generation_{cpu}", payload)
    log = [
        f"bench/generation.py {' '.join(sys.argv[1:])}  (commit {payload['commit']}, {info['time']})",
        f"load average before/after: {load_before:.2f}/{payload['load_after']:.2f}; {args.note}".rstrip("; "),
        "tok/s: steady state, the best of the later generates, prefill included",
        *lines,
    ]
    path.with_suffix(".log").write_text("\n".join(log) + "\n")
    print("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
