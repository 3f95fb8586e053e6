"""Benchmark: two tuning databases of one model, compiled and timed in one process, rounds interleaved, beside
ONNX Runtime (same threads): which tuning made the faster model, without the drift between two corpus runs.

    python bench/ab_databases.py model.onnx before.db after.db --threads 1

Prints the medians, each database's ratio to ONNX Runtime and after/before, plain and as the median of paired
rounds (the figures quoted for flushed vs warm tuning and the sibling cap in the README).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the ONNX file both databases were tuned for")
    p.add_argument("before", help="tuning database A")
    p.add_argument("after", help="tuning database B")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=15, help="interleaved rounds (median reported)")
    args = p.parse_args(argv)
    for path in (args.model, args.before, args.after):
        if not Path(path).is_file():
            p.error(f"no such file: {path}")
    fair_environment(args.threads)
    from autosched.db import open_database
    from autosched.deploy.build import compile_model
    from autosched.deploy.reference import onnxruntime_session
    from autosched.graph.frontends import load_model
    from autosched.graph.passes import rewrite
    from autosched.tasks import make_target
    from autosched.timing import time_interleaved

    model = load_model(args.model)
    target = make_target("llvm", args.threads)
    fused = rewrite(model.mod, target)
    a, b = (compile_model(model, target, open_database(db, create=False), fused=fused)
            for db in (args.before, args.after))
    x = model.random_inputs(0)
    session = onnxruntime_session(model, args.threads)
    feed = {spec.name: v for spec, v in zip(model.inputs, x, strict=True)}
    rounds = time_interleaved({"A": lambda: a(*x), "B": lambda: b(*x), "ort": lambda: session.run(None, feed)},
                              args.repeat, 0.5)
    med = {k: statistics.median(v) for k, v in rounds.items()}

    def paired(p: str, q: str) -> float:
        return statistics.median(u / w for u, w in zip(rounds[p], rounds[q], strict=True))

    print({k: round(v * 1e3, 3) for k, v in med.items()}, "ms")
    print(f"A/ort {med['A'] / med['ort']:.3f} B/ort {med['B'] / med['ort']:.3f} B/A {med['B'] / med['A']:.3f} | "
          f"paired A/ort {paired('A', 'ort'):.3f} B/ort {paired('B', 'ort'):.3f} B/A {paired('B', 'A'):.3f}")


if __name__ == "__main__":
    main()
