"""Tune one matmul on this CPU, then load the best kernel from the database and use it like a library.

    python examples/single_operator/tune_matmul.py                 # 512^3, 64 trials (~1 minute)
    python examples/single_operator/tune_matmul.py --size 64 --trials 8 --db /tmp/mm.db   # a quick look
"""

from __future__ import annotations

import numpy as np

import autosched
from autosched._tvm import cpu_device, tvm
from autosched.family_example import ExampleParser


def main() -> None:
    p = ExampleParser()  # a bad argument: one line on stderr, exit code 2
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--db", default="tuning_logs/example_matmul.db")
    args = p.parse_args()

    n = args.size
    config = autosched.TuneConfig(n_trials=args.trials, n_threads=args.threads)
    progress = lambda pr: print(f"  {pr.n_done}/{pr.n_total} trials, best {pr.best_gflops:.1f} GFLOPS", flush=True)
    result = autosched.tune_operator("matmul", (n, n, n), db=args.db, config=config, on_progress=progress)
    print(f"best: {result.best_latency_s * 1e3:.3f} ms after {result.n_measured} trials")

    kernel = autosched.load_kernel(args.db, result.task.key)  # what serving code does
    dev = cpu_device()
    a, b = (np.random.default_rng(i).random((n, n), dtype=np.float32) for i in (1, 2))
    out = tvm.runtime.empty((n, n), "float32", dev)
    kernel["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-3, atol=1e-3)
    timer = kernel.time_evaluator("main", dev, number=10, repeat=3)
    args_ = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out]
    print(f"loaded kernel matches numpy: {timer(*args_).median * 1e3:.3f} ms per call")


if __name__ == "__main__":
    main()
