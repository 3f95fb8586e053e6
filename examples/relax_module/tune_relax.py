"""Tune a TVM Relax module written with relax.frontend.nn (a two-layer MLP), weights bound as constants.

    python examples/relax_module/tune_relax.py                      # 64 trials per task
    python examples/relax_module/tune_relax.py --trials 4 --db /tmp/relax.db
"""

from __future__ import annotations

import numpy as np

import autosched
from autosched._tvm import relax, tvm
from autosched.family_example import ExampleParser


def build_module(batch: int, seed: int = 0):
    from tvm.relax.frontend import nn

    class MLP(nn.Module):
        def __init__(self):
            self.fc1, self.fc2 = nn.Linear(256, 512), nn.Linear(512, 10)

        def forward(self, x):
            return self.fc2(nn.relu(self.fc1(x)))

    mod, params = MLP().export_tvm(spec={"forward": {"x": nn.spec.Tensor((batch, 256), "float32")}})
    rng = np.random.default_rng(seed)
    weights = {name: (rng.standard_normal([int(d) for d in p.shape]) * 0.05).astype("float32") for name, p in params}
    bound = relax.transform.BindParams("forward", {k: tvm.runtime.tensor(v) for k, v in weights.items()})(mod)
    return bound, weights


def main() -> None:
    p = ExampleParser()  # a bad argument: one line on stderr, exit code 2
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--trials", type=int, default=64, help="trials per task, on average")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--db", default="tuning_logs/example_relax.db")
    args = p.parse_args()

    mod, w = build_module(args.batch)
    model = autosched.load_model(mod, name="relax_mlp")
    result = autosched.tune_model(model, db=args.db, config=autosched.TuneConfig(n_trials=args.trials,
                                                                                  n_threads=args.threads))
    print(f"{len(result.states)} tasks; estimated {result.estimated_s * 1e3:.3f} ms per inference "
          f"(untuned {result.untuned_s * 1e3:.3f} ms)")
    compiled = autosched.compile(model, db=args.db, n_threads=args.threads)
    x = model.random_inputs(seed=1)[0]
    want = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0) @ w["fc2.weight"].T + w["fc2.bias"]
    np.testing.assert_allclose(compiled(x)[0], want, rtol=1e-4, atol=1e-4)
    print(f"{dict(compiled.counts())} fusion groups; matches numpy: "
          f"{np.median(compiled.time([x], n_threads=args.threads)) * 1e3:.3f} ms per inference")


if __name__ == "__main__":
    main()
