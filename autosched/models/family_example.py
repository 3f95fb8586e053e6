"""What every model-family example under ``examples/`` does once it has built its model.

An example defines a PyTorch module with random weights (the part a user replaces with their own model) and
calls ``run_example``: the module is exported to ONNX and imported from that file (or imported through
``torch.export`` where TVM's ONNX importer lacks an operator, e.g. LSTM), tuned within a small time budget,
compiled from the database, checked against ONNX Runtime (or PyTorch), and timed beside them through the call
each one serves with, in interleaved rounds. The table it prints is the example's result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MAX_ERROR = 1e-3
Build = Callable[[bool], tuple[Any, tuple]]  # small -> (eval-mode torch module, example inputs)


def parse_args(name: str, argv: list[str] | None = None) -> argparse.Namespace:
    from autosched.config import parse_duration

    p = argparse.ArgumentParser(description=f"Tune, compile and check the {name} example.")
    p.add_argument("--time", type=parse_duration, default=180.0, help="tuning budget (default 3m; 90s, 10m, ...)")
    p.add_argument("--trials", type=int, default=0, help="trials per task on average (default: as the time allows)")
    p.add_argument("--threads", type=int, help="threads to tune and serve with (default: all cores)")
    p.add_argument("--db", default=f"tuning_logs/example_{name}.db", help="the tuning database (re-runs resume)")
    p.add_argument("--small", action="store_true", help="a smaller model (tests, quick looks)")
    return p.parse_args(argv)


def export_onnx(module: Any, inputs: tuple, path: Path, input_names: list[str]) -> Path:
    """The module as an ONNX file (opset 17, TorchScript exporter), as a user's export would be."""
    import warnings

    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, str(path), dynamo=False, input_names=input_names, opset_version=17)
    return path


def run_example(name: str, build: Build, input_names: list[str], via: str = "onnx",
                argv: list[str] | None = None, after: Callable[[Any, Any, argparse.Namespace], None] | None = None
                ) -> dict[str, float]:
    """Tune, compile, check and time the model ``build`` makes; returns the median latencies (seconds).
    ``via``: "onnx" (export, then import the file) or "torch" (``torch.export``). ``after(compiled, module,
    args)``: more the example shows with the compiled model (e.g. generation)."""
    import torch

    import autosched
    from autosched.models.build import compile_unscheduled
    from autosched.models.reference import max_relative_error, onnxruntime_session, run_onnxruntime
    from autosched.tasks import make_target
    from autosched.timing import time_interleaved

    args = parse_args(name, argv)
    torch.manual_seed(0)
    module, inputs = build(args.small)
    module.eval()
    arrays = [t.numpy() for t in inputs]
    with tempfile.TemporaryDirectory() as tmp:
        if via == "onnx":
            model = autosched.load_model(str(export_onnx(module, inputs, Path(tmp) / f"{name}.onnx", input_names)))
        else:
            model = autosched.load_model(module, example_inputs=inputs, name=name)
    config = autosched.TuneConfig(n_trials=args.trials, n_threads=args.threads, time_budget_s=args.time)
    start = time.perf_counter()
    result = autosched.tune_model(model, db=args.db, config=config, on_progress=_progress())
    print(f"{name}: {result.n_tasks} tasks ({result.n_tuned} tuned, {result.n_default} on default schedules), "
          f"{result.n_new} measurements in {time.perf_counter() - start:.0f} s", flush=True)

    compiled = autosched.compile(model, db=args.db, n_threads=config.threads)
    untuned = compile_unscheduled(model, make_target("llvm", config.threads))
    with torch.no_grad():
        want = [o.numpy() for o in _outputs(module(*inputs))]
    session = onnxruntime_session(model, config.threads) if model.onnx_bytes is not None else None
    if session is not None:
        want = run_onnxruntime(session, model, arrays)
    error = max_relative_error(compiled(*arrays), want)
    reference = "ONNX Runtime" if session is not None else "PyTorch"
    if not error <= MAX_ERROR:
        sys.exit(f"{name}: autosched's outputs differ from {reference}'s (max rel. error {error:.1e})")

    torch.set_num_threads(config.threads)
    calls: dict[str, Callable[[], object]] = {"autosched": lambda: compiled(*arrays)}
    if session is not None:
        feed = {spec.name: x for spec, x in zip(model.inputs, arrays, strict=True)}
        calls["ONNX Runtime"] = lambda: session.run(None, feed)
    with torch.no_grad():
        calls["PyTorch"] = lambda: module(*inputs)
        times = {k: statistics.median(v) for k, v in time_interleaved(calls, repeat=5, min_round_s=0.1).items()}
    times["TVM untuned"] = statistics.median(time_interleaved({"u": lambda: untuned(*arrays)}, 1, 0.0)["u"])
    _print_table(name, times, config.threads, error, reference, compiled.counts())
    if after is not None:
        after(compiled, module, args)
    return times


def _outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple | list) else [out]


def _progress() -> Callable[[Any], None]:
    last = [0.0]

    def show(p: Any) -> None:
        if time.perf_counter() - last[0] >= 15:
            last[0] = time.perf_counter()
            print(f"  {p.n_done} trials, estimated {p.estimated_s * 1e3:.3f} ms per inference "
                  f"(untuned {p.untuned_s * 1e3:.3f} ms), {p.elapsed_s:.0f} s", flush=True)

    return show


def _print_table(name: str, times: dict[str, float], threads: int, error: float, reference: str,
                 counts: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{name}: latency of one call, {threads} thread(s), median of interleaved rounds")
    for col in ("runtime", "ms", "autosched speed-up"):
        table.add_column(col, justify="left" if col == "runtime" else "right")
    mine = times["autosched"]
    for who, seconds in times.items():
        table.add_row(who, f"{seconds * 1e3:.3f}", "-" if who == "autosched" else f"{seconds / mine:.2f}x")
    Console().print(table)
    print(f"fusion groups: {dict(counts)}; outputs match {reference} (max rel. error {error:.1e})")


def check_tokens(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Exit non-zero if token sequences differ (generation examples)."""
    if not np.array_equal(got, want):
        sys.exit(f"{what}: autosched generated {got.tolist()}, PyTorch {want.tolist()}")
