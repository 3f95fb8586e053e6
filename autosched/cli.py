"""Command line: ``autosched tune | show | report | export | import``. The CLI owns all output."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from autosched.config import COST_MODELS, parse_duration
from autosched.errors import AutoschedError, UserInputError

EXIT_USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        raise UserInputError(f"{message} (see autosched {self.prog.split()[-1]} --help)")


def _add_tune(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune a model (ONNX file or zoo:NAME), one tensor operator (--op) or your own "
                                    "tensor program (--func)")
    p.add_argument("model", nargs="?", help="an .onnx file, or zoo:mlp | zoo:resnet18 | zoo:bert (built-in)")
    p.add_argument("--input", action="append", help="shape of a model input, NAME:1x3x224x224 (repeatable)")
    _bucket_arg(p)
    _precision_arg(p)
    p.add_argument("--op", help="catalog operator: matmul, batch_matmul, dense, conv2d, ...")
    p.add_argument("--shape", help="operator sizes, comma-separated, e.g. 512,512,512 (with --op)")
    p.add_argument("--func", metavar="PATH.py:NAME",
                   help="a tensor program in a Python file: a TE tensor or list of tensors, a TIR PrimFunc, an "
                        "IRModule (one PrimFunc, or a Relax model), or a function without arguments returning one")
    p.add_argument("--target", default="llvm", help="llvm (this CPU), aarch64[:MCPU], cuda, sm_80, cuda:sm_90, a TVM "
                   "tag (nvidia/nvidia-a100) or a JSON dict")
    p.add_argument("--trials", type=int, help="measured candidates per task, earlier runs included (64)")
    # parse_duration refuses 0 (a tune needs time) with a UserInputError naming --time: argparse lets it through
    # to main(), one line, exit 2, like its own errors (tests/test_cli_arguments.py checks every typed option)
    p.add_argument("--time", type=parse_duration, metavar="DURATION",
                   help="a model's wall-time budget (90s, 10m, 1.5h or seconds), baselines included; with --trials "
                        "it stops at whichever ends first, alone it lifts the trial limit")
    p.add_argument("--db", default="tuning_logs/autosched.db", help="SQLite path or SQLAlchemy URL")
    p.add_argument("--sampler", help="tpe (default), random, cmaes, gp, nsga2")
    p.add_argument("--seed", type=int, help="seed of the sampler, design spaces and inputs (0)")
    p.add_argument("--threads", type=int, help="CPU threads of the measured kernels (default: all cores)")
    p.add_argument("--batch", type=int, help="candidates built in parallel per round (8)")
    p.add_argument("--config", help="TOML file with [tune] defaults; flags override it")
    p.add_argument("--no-baseline", action="store_true", help="skip measuring the untuned operator")
    p.add_argument("--cost-model", choices=COST_MODELS,
                   help="screen proposals with a cost model before measuring (xgb)")
    p.add_argument("--no-transfer", action="store_true",
                   help="do not start from the shipped cross-task cost model (learn online only)")
    p.add_argument("--transfer-model", help="a saved cost-model folder to start from instead of the shipped one")
    p.add_argument("--rpc", metavar="HOST:PORT", help="measure on the devices registered at this TVM RPC tracker "
                                                       "(python -m tvm.exec.rpc_tracker), one candidate per device "
                                                       "at a time; builds stay on this machine")
    p.add_argument("--key", metavar="KEY", help="with --rpc: the key the devices registered under "
                                                "(python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="no progress bar and no table: one line at the end")
    shown.add_argument("--json", action="store_true",
                       help="progress and the result as JSON lines on stdout (one object per update, then the result)")


def _precision_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16", "int8"), default="fp32",
                   help="matmuls and convolutions in bf16 or fp16 with float32 accumulation, or matmuls in int8 "
                        "(calibrated on random inputs); softmax, norms, reductions and the final logits stay fp32 "
                        "(default fp32; the same for tune and compile)")


def _bucket_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape-buckets", action="append", metavar="SYMBOL=SIZES",
                   help="an ONNX model with symbolic dimensions: the sizes to tune and compile for, e.g. "
                        "seq=16,32,64,128,256, or seq=1..256 to let autosched pick; other sizes run padded into "
                        "the next larger bucket where that is exact (repeatable, one per symbol)")


def _padding_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-padding", type=float, metavar="RATIO",
                   help="with --shape-buckets: also build sizes between the buckets (1, 2, 4, multiples of 8), each "
                        "with the schedules of the bucket it would pad into, refitted, so that a size pads by at "
                        "most RATIO, e.g. 1.25 (one more build, and copy of the weights, per size)")


def _model_args(p: argparse.ArgumentParser, threads_default: int | None = None) -> None:
    p.add_argument("model", help="an .onnx file, or zoo:mlp | zoo:resnet18 | zoo:bert (built-in)")
    p.add_argument("--input", action="append", help="shape of a model input, NAME:1x3x224x224 (repeatable)")
    p.add_argument("--target", default="llvm", help="llvm (this CPU) or a JSON dict; must match the tuning run's")
    p.add_argument("--threads", type=int, default=threads_default,
                   help="CPU threads (part of the target, as when tuning; default: all cores)")
    _precision_arg(p)


def _add_model_commands(sub: argparse._SubParsersAction) -> None:
    import os

    cores = os.cpu_count() or 1
    p = sub.add_parser("inspect", help="graph rewrites, fusion groups and memory plan of a model")
    _model_args(p, cores)
    p = sub.add_parser("compile", help="build a model with its tuned schedules into a shared library")
    _model_args(p, cores)
    p.add_argument("--db", required=True, help="tuning database (SQLite path or SQLAlchemy URL)")
    p.add_argument("-o", "--output", required=True, help="library to write (a .so; PATH.json is written beside)")
    _bucket_arg(p)
    _padding_arg(p)
    p = sub.add_parser("run", help="time a tuned model against the untuned build and ONNX Runtime, check outputs")
    _model_args(p, cores)
    p.add_argument("--db", required=True, help="tuning database (SQLite path or SQLAlchemy URL)")
    p.add_argument("--repeat", type=int, default=5, help="timing samples per build (median reported)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--tolerance", type=float, help="max relative error vs ONNX Runtime (1e-3; 2e-2 with --precision "
                                                   "bf16, 1e-2 with fp16, 5e-2 with int8)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also time every kernel of the tuned build and show the N slowest with their schedules")
    _bucket_arg(p)
    _padding_arg(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autosched", description="Search-based auto-scheduler and autotuner on TVM.")
    parser.add_argument("-v", "--verbose", action="store_true", help="also show the library's log on the terminal")
    parser.add_argument("--log", help="file for TVM's own warnings and the library's log "
                                      "(default: ~/.cache/autosched/autosched.log)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_tune(sub)
    _add_model_commands(sub)
    p = sub.add_parser("show", help="best record per task in a database")
    p.add_argument("--db", required=True)
    p = sub.add_parser("report", help="tuning report of a database: one self-contained HTML file (plots embedded) "
                                      "or JSON")
    p.add_argument("--db", required=True, help="tuning database (SQLite path or SQLAlchemy URL)")
    p.add_argument("-o", "--output", required=True, help="file to write (report.html, or report.json)")
    p.add_argument("--format", choices=("html", "json"),
                   help="html (plots need matplotlib: autosched[report]) or json; default: json for a .json "
                        "output, else html")
    p = sub.add_parser("train-cost-model", help="train a cross-task XGBoost cost model from tuning databases")
    p.add_argument("--db", action="append", required=True, help="a tuning database (repeat for several)")
    p.add_argument("-o", "--output", required=True, help="folder to write (model.json + meta.json)")
    p.add_argument("--rounds", type=int, default=200, help="boosting rounds")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("export", help="write a database's tasks and records as JSON lines")
    p.add_argument("--db", required=True)
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("import", help="add tasks and records from a JSON-lines export to a database")
    p.add_argument("file")
    p.add_argument("--db", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console

    err = Console(stderr=True)
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = build_parser().parse_args(argv)
        args.argv = argv  # recorded by commands that write artefacts (the command that rebuilds them)
        return _run_quietly(args, err)
    except UserInputError as e:
        err.print(f"autosched: error: {_one_line(e)}", style="red", highlight=False, soft_wrap=True, markup=False)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        err.print("autosched: interrupted; every fully measured candidate is in the database")
        return 130
    except AutoschedError as e:
        err.print(f"autosched: error: {_one_line(e)}", style="red", highlight=False, soft_wrap=True, markup=False)
        return 1
    except Exception as e:  # a bug or an unforeseen TVM failure: one line here, the traceback in the log
        from autosched.db.sql import database_failure
        from autosched.models.graph import failure_reason

        reason = database_failure(e)  # the database failed inside a library (Optuna's storage): disk full, ...
        if reason:
            err.print(f"autosched: error: {reason}", style="red", highlight=False, soft_wrap=True, markup=False)
            return EXIT_USER_ERROR

        err.print(f"autosched: internal error: {failure_reason(e)} (traceback in the log file; please report it)",
                  style="red", highlight=False, soft_wrap=True, markup=False)
        return 1


def _one_line(e: BaseException) -> str:
    """The message on one line, whatever the user's input it quotes holds (newlines, carriage returns)."""
    return " ".join(str(e).splitlines())


def _run_quietly(args: argparse.Namespace, err) -> int:
    """Run the command with TVM's C++ warnings and Python warnings sent to the log file; one summary line."""
    from autosched.native_log import default_log_path, native_output_to

    log_path = Path(args.log) if args.log else default_log_path()
    try:
        context = native_output_to(log_path)
        native = context.__enter__()
    except OSError as e:
        raise UserInputError(f"cannot write the log file {log_path} ({e.strerror}): pick another --log path") from e
    logging.getLogger("autosched").setLevel(logging.INFO)
    console = logging.StreamHandler(sys.stderr) if args.verbose else None
    if console:
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(console)
    try:
        from autosched import commands, model_commands

        module = model_commands if args.command in ("inspect", "compile", "run") else commands
        return getattr(module, f"cmd_{args.command.replace('-', '_')}")(args)
    except (AutoschedError, KeyboardInterrupt):
        raise
    except Exception:
        logging.getLogger("autosched.cli").exception("unexpected failure")  # the full traceback, to the log file
        raise
    finally:
        if console:
            logging.getLogger().removeHandler(console)
        context.__exit__(None, None, None)
        if native.n_warnings:
            err.print(f"({native.n_warnings} warning lines from TVM and libraries written to {log_path})",
                      style="dim", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build_parser", "json", "Path"]
