"""Tune a PyTorch module (imported through torch.export), then run the tuned build and compare with PyTorch.

    python examples/pytorch_model/tune_pytorch.py                   # the BERT encoder, 64 trials per task
    python examples/pytorch_model/tune_pytorch.py --model tiny_mlp --trials 4 --db /tmp/mlp.db
"""

from __future__ import annotations

import numpy as np
import torch

import autosched
from autosched.corpus import zoo
from autosched.family_example import ExampleParser


def main() -> None:
    p = ExampleParser()  # a bad argument: one line on stderr, exit code 2
    p.add_argument("--model", default="bert", choices=zoo.ZOO)
    p.add_argument("--trials", type=int, default=64, help="trials per task, on average")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--db", default="tuning_logs/example_pytorch.db")
    args = p.parse_args()

    module, example_inputs = zoo.build(args.model)  # any torch.nn.Module in eval mode works the same
    model = autosched.load_model(module, example_inputs=example_inputs)
    config = autosched.TuneConfig(n_trials=args.trials, n_threads=args.threads)
    result = autosched.tune_model(model, db=args.db, config=config)
    print(f"{len(result.states)} tasks; estimated {result.estimated_s * 1e3:.3f} ms per inference "
          f"(untuned {result.untuned_s * 1e3:.3f} ms)")

    compiled = autosched.compile(model, db=args.db, n_threads=args.threads)
    inputs = [t.numpy() for t in example_inputs]
    with torch.no_grad():
        want = module(*example_inputs).numpy()
    got = compiled(*inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    print(f"{dict(compiled.counts())} fusion groups; matches PyTorch: "
          f"{np.median(compiled.time(inputs, n_threads=args.threads)) * 1e3:.3f} ms per inference")


if __name__ == "__main__":
    main()
