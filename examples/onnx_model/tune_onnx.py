"""Tune an ONNX model, build it from the database into a library, load that and check it against ONNX Runtime.

    python examples/onnx_model/tune_onnx.py                         # ResNet-18, 64 trials per task (~15 min)
    python examples/onnx_model/tune_onnx.py --model tiny_cnn --trials 4 --db /tmp/cnn.db   # a quick look

The model is one of autosched's built-in ones (random weights), written to an .onnx file first: from
there on this is exactly what you do with your own file (`autosched tune your.onnx` on the command line).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import autosched
from autosched.corpus import zoo
from autosched.deploy.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.family_example import ExampleParser


def main() -> None:
    p = ExampleParser()  # a bad argument: one line on stderr, exit code 2
    p.add_argument("--model", default="resnet18", choices=zoo.ZOO)
    p.add_argument("--trials", type=int, default=64, help="trials per task, on average")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--db", default="tuning_logs/example_onnx.db")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = zoo.export_onnx(args.model, Path(tmp) / f"{args.model}.onnx")
        model = autosched.load_model(str(onnx_path))
        config = autosched.TuneConfig(n_trials=args.trials, n_threads=args.threads)

        def progress(pr) -> None:
            print(f"  {pr.n_done}/{pr.n_total} trials, estimated {pr.estimated_s * 1e3:.3f} ms per inference "
                  f"(untuned {pr.untuned_s * 1e3:.3f} ms)", flush=True)

        result = autosched.tune_model(model, db=args.db, config=config, on_progress=progress)
        print(f"tuned {len(result.states)} tasks in {result.elapsed_s:.0f} s")

        compiled = autosched.compile(model, db=args.db, n_threads=args.threads)  # what serving code does
        library = compiled.export_library(Path(tmp) / f"{args.model}.so")
        served = autosched.load_compiled(library)
        inputs = model.random_inputs(seed=1)
        error = max_relative_error(served(*inputs), run_onnxruntime(onnxruntime_session(model, 1), model, inputs))
        assert error < 1e-3, error
        ms = np.median(served.time(inputs, n_threads=args.threads)) * 1e3
        print(f"{dict(served.counts())} fusion groups; the loaded library matches ONNX Runtime "
              f"(max rel. error {error:.1e}): {ms:.3f} ms per inference")


if __name__ == "__main__":
    main()
