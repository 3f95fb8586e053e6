"""What every model-family example under ``examples/`` does once it has built its model.

An example defines a PyTorch module with random weights (the part a user replaces with their own model) and
an ``EXAMPLE``; ``run_example`` exports the module to ONNX and imports that file (or imports it through
``torch.export`` where TVM's ONNX importer lacks an operator, e.g. LSTM), tunes it within a small time budget,
compiles it from the database, checks it against ONNX Runtime (or PyTorch), and times it beside them through
the call each one serves with, in interleaved rounds. The table it prints is the example's result.

Each example ships its tuning log, ``tuning_logs/example_<name>.jsonl.gz`` (``autosched export`` of a real
tuning run on this CPU): a first run starts from it, and ``--time 0`` only compiles and times what it holds.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

MAX_ERROR = 1e-3
ROOT = Path(__file__).resolve().parents[1]
Build = Callable[[bool], tuple[Any, tuple]]  # small -> (eval-mode torch module, example inputs)


@dataclass(frozen=True)
class Example:
    """What one family example defines: its name, how to build its model, its inputs' names, its import path
    ("onnx": export, then import the file; "torch": ``torch.export``)."""

    name: str
    build: Build
    input_names: list[str]
    via: str = "onnx"

    @property
    def shipped_log(self) -> Path:
        return ROOT / "tuning_logs" / f"example_{self.name}.jsonl.gz"


@dataclass
class Prepared:
    """An example's model as autosched imports it, with the PyTorch module and inputs it came from and its ONNX
    export (what ONNX Runtime runs; None where the exporter fails)."""

    model: Any
    module: Any
    inputs: tuple
    onnx_bytes: bytes | None


def load_example(name: str) -> tuple[Example, Any]:
    """``examples/<name>/tune_<name>.py``: its ``EXAMPLE`` and the module itself (for what else it defines)."""
    path = ROOT / "examples" / name / f"tune_{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    if spec is None or not path.exists():
        raise SystemExit(f"no example {name!r}: examples/<name>/tune_<name>.py does not exist")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # importable by name (torch.compile looks a module's classes up there)
    spec.loader.exec_module(module)
    return module.EXAMPLE, module


def prepare(example: Example, small: bool) -> Prepared:
    """Build the module (seeded: the same model every time) and import it the example's way."""
    import torch

    from autosched import api

    torch.manual_seed(0)
    module, inputs = example.build(small)
    module.eval()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{example.name}.onnx"
        try:
            onnx_bytes = export_onnx(module, inputs, path, example.input_names).read_bytes()
        except Exception:  # noqa: BLE001 - no ONNX Runtime column then; the torch path still imports it
            if example.via == "onnx":
                raise
            onnx_bytes = None
        if example.via == "onnx":
            model = api.load_model(str(path))
        else:
            model = api.load_model(module, example_inputs=inputs, name=example.name)
    return Prepared(model, module, inputs, onnx_bytes)


class ExampleParser(argparse.ArgumentParser):
    """An example script's argument parser: a bad argument is one line on stderr (``prog: error: message``) and
    exit code 2, as with the ``autosched`` command, without argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.splitlines())}\n")


def non_negative_int(text: str) -> int:
    """An argparse ``type=`` for a count where 0 has a meaning (no limit, all cores): an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 0")
    return value


def example_parser(name: str) -> ExampleParser:
    """The arguments every family example takes (``--time 0``: no tuning, compile and time from the database)."""
    from autosched.config import duration_type

    p = ExampleParser(description=f"Tune, compile and check the {name} example.")
    p.add_argument("--time", type=duration_type(allow_zero=True), default=180.0, metavar="DURATION",
                   help="tuning budget (default 3m; 90s, 10m, ...; 0: no tuning, compile from the database)")
    p.add_argument("--trials", type=non_negative_int, default=0,
                   help="trials per task on average (default: as the time allows)")
    p.add_argument("--threads", type=non_negative_int, help="threads to tune and serve with (default: all cores)")
    p.add_argument("--db", default=f"tuning_logs/example_{name}.db",
                   help="the tuning database (re-runs resume; a new one starts from the shipped log)")
    p.add_argument("--small", action="store_true", help="a smaller model (tests, quick looks)")
    p.add_argument("--target", default="llvm",
                   help="llvm (this CPU, default) or another CPU of this architecture that this one can run, e.g. "
                        "'{\"kind\": \"llvm\", \"mcpu\": \"x86-64-v3\"}' (the AVX2 baseline the shipped logs have)")
    return p


def parse_args(name: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The example's arguments; a bad one: one line on stderr, exit code 2 (``ExampleParser``)."""
    return example_parser(name).parse_args(argv)


def export_onnx(module: Any, inputs: tuple, path: Path, input_names: list[str]) -> Path:
    """The module as an ONNX file (opset 17, TorchScript exporter), as a user's export would be."""
    import warnings

    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, str(path), dynamo=False, input_names=input_names, opset_version=17)
    return path


def start_from_shipped_log(example: Example, db: str, small: bool) -> None:
    """A new database for the full-size model starts with the shipped log's tasks and records."""
    if small or Path(db).exists() or not example.shipped_log.exists() or "://" in db:
        return
    from autosched.db import open_database
    from autosched.db.transfer import import_jsonl, read_jsonl

    with open_database(db) as database:
        n_tasks, n_records = import_jsonl(database, *read_jsonl(example.shipped_log))
    print(f"{db}: started from the shipped log {example.shipped_log.relative_to(ROOT)} "
          f"({n_tasks} tasks, {n_records} records)", flush=True)


def run_example(name: str | Example, build: Build | None = None, input_names: list[str] | None = None,
                via: str = "onnx", argv: list[str] | None = None,
                after: Callable[[Any, Any, argparse.Namespace], None] | None = None) -> dict[str, float]:
    """Tune, compile, check and time an example's model; returns the median latencies (seconds).
    ``after(compiled, module, args)``: more the example shows with the compiled model (e.g. generation)."""
    from autosched.native_log import default_log_path, native_output_to

    example = name if isinstance(name, Example) else Example(name, build, input_names, via)
    args = parse_args(example.name, argv)
    from autosched.errors import UserInputError

    with native_output_to(default_log_path()) as log:  # TVM's C++ warnings to the log file, not the screen
        try:
            times = _run(example, args, after)
        except UserInputError as err:  # a database that is not there, ...: one line, exit 2, as the CLI does
            sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {' '.join(str(err).splitlines())}\n")
            raise SystemExit(2) from None
    if log.n_warnings:
        print(f"{log.n_warnings} warnings from TVM and the libraries went to {log.path}", file=sys.stderr)
    return times


def _run(example: Example, args: argparse.Namespace,
         after: Callable[[Any, Any, argparse.Namespace], None] | None) -> dict[str, float]:

    from autosched import api
    from autosched.config import TuneConfig
    from autosched.deploy.compare import ONNXRUNTIME, PYTORCH, as_arrays, compare, peer_calls
    from autosched.targets import check_measurable

    prepared = prepare(example, args.small)
    model, module, inputs = prepared.model, prepared.module, prepared.inputs
    arrays = [t.numpy() for t in inputs]
    config = TuneConfig(n_trials=args.trials, n_threads=args.threads, time_budget_s=args.time)
    # checked to run here; tune_model checks the rest (its cost model) when it tunes
    target = check_measurable(api.build_target(args.target, config.threads))
    start_from_shipped_log(example, args.db, args.small)
    if args.time or args.trials:
        start = time.perf_counter()
        result = api.tune_model(model, target, db=args.db, config=config, on_progress=_progress())
        print(f"{example.name}: {result.n_tasks} tasks ({result.n_tuned} tuned, {result.n_default} on default "
              f"schedules), {result.n_new} measurements in {time.perf_counter() - start:.0f} s", flush=True)

    compiled = api.compile(model, target, db=args.db, n_threads=config.threads)
    if compiled.foreign or compiled.skipped:
        from autosched.scheduler.foreign import Adopted

        print(f"{example.name}: {Adopted(compiled.foreign, compiled.skipped).summary()}", flush=True)
    untuned = api.compile_unscheduled(model, api.build_target("llvm", config.threads))
    peers = peer_calls(arrays, config.threads, prepared.onnx_bytes, module, inputs, names=(ONNXRUNTIME, PYTORCH))
    # the file autosched imported is the reference where it is ONNX (ONNX Runtime runs it), else the PyTorch module
    reference = ONNXRUNTIME if ONNXRUNTIME in peers.calls and example.via == "onnx" else PYTORCH
    want = as_arrays(peers.calls[reference]())
    label = {ONNXRUNTIME: "ONNX Runtime", PYTORCH: "PyTorch"}
    comparison = compare({"autosched": lambda: compiled(*arrays), **peers.calls}, want, repeat=5,
                         refuse_above={"autosched": MAX_ERROR})
    error, reference = comparison.errors["autosched"], label[reference]
    if "autosched" in comparison.untimed:
        sys.exit(f"{example.name}: autosched's outputs differ from {reference}'s (max rel. error {error:.1e})")
    times = {label.get(k, k): v for k, v in comparison.median_s.items()}
    times["TVM untuned"] = compare({"untuned": lambda: untuned(*arrays)}, want, repeat=1, min_round_s=0.0
                                   ).median_s["untuned"]
    _print_table(example.name, times, config.threads, error, reference, compiled.counts())
    if after is not None:
        after(compiled, module, args)
    return times


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
