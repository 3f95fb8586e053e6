"""The command line's arguments: the parser of every command, and the tuning flags turned into a ``TuneConfig``."""

from __future__ import annotations

import argparse

from autosched.config import COST_MODELS, DEFAULT_DATABASE, TuneConfig, parse_duration, resolve_threads
from autosched.errors import UserInputError


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
    # to main(), one line, exit 2, like its own errors (tests/cli/test_cli_arguments.py checks every typed option)
    p.add_argument("--time", type=parse_duration, metavar="DURATION",
                   help="a model's wall-time budget (90s, 10m, 1.5h or seconds), baselines included; with --trials "
                        "it stops at whichever ends first, alone it lifts the trial limit")
    p.add_argument("--db", default=DEFAULT_DATABASE, help="SQLite path or SQLAlchemy URL")
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
    p.add_argument("--in-model", type=int, metavar="N",
                   help="models, CPU: at the end, time up to N schedules of each of the heaviest tasks inside the "
                        "model and keep the combination that makes it fastest (4; 0 = off)")
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
    cores = resolve_threads()
    p = sub.add_parser("inspect", help="graph rewrites, fusion groups and memory plan of a model")
    _model_args(p, cores)
    p = sub.add_parser("compile", help="build a model with its tuned schedules into one artifact (or a shared "
                                       "library)")
    _model_args(p, cores)
    p.add_argument("--db", required=True, help="tuning database (SQLite path or SQLAlchemy URL)")
    p.add_argument("-o", "--output", required=True,
                   help="what to write: an artifact, one zip file (model.autosched), or a folder where the path ends "
                        "in / or is an existing folder (library, signature, target, versions, tuning provenance; "
                        "autosched.load(PATH)); a path ending in .so writes the bare library and PATH.json beside it")
    _bucket_arg(p)
    _padding_arg(p)
    p = sub.add_parser("run", help="time a tuned model against the untuned build and ONNX Runtime, check outputs; "
                                   "or time an artifact (autosched run model.autosched)")
    _model_args(p, cores)
    p.add_argument("--db", help="tuning database (SQLite path or SQLAlchemy URL); required for a MODEL, not for an "
                                "artifact")
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
    p = sub.add_parser("doctor", help="this machine as autosched sees it: CPU and its vector extensions, the target "
                                      "and threads it uses, versions, GPU, which shipped logs and records apply")
    p.add_argument("--db", help="also say how many of this database's records apply here, and why the others do not")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout instead of tables")
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



FLAGS = (("n_trials", "trials"), ("seed", "seed"), ("n_threads", "threads"), ("batch_size", "batch"),  # field, flag
         ("in_model", "in_model"))


def config_from_args(args: argparse.Namespace) -> TuneConfig:
    """The tuning config of ``tune``: ``--config``'s file, then the flags over it. ``--time`` alone lifts the
    trial limit (``n_trials=0``: the clock decides). The API's checks (``autosched.api.checked_config``) run on
    it; an error about a field a flag gave names the flag."""
    from autosched.api import checked_config

    base = TuneConfig.from_toml(args.config) if getattr(args, "config", None) else TuneConfig()
    time_s = getattr(args, "time", None)
    try:
        config = base.replace(n_trials=args.trials, sampler=args.sampler, seed=args.seed, n_threads=args.threads,
                              batch_size=args.batch, cost_model=args.cost_model,
                              transfer=False if args.no_transfer else None, transfer_model=args.transfer_model,
                              rpc=getattr(args, "rpc", None), rpc_key=getattr(args, "key", None),
                              time_budget_s=time_s, in_model=getattr(args, "in_model", None))
        if time_s is not None and args.trials is None:
            config = config.replace(n_trials=0)
        return checked_config(config)
    except UserInputError as e:  # name the flag, not the config field, when a flag gave the value
        for field, flag in FLAGS:
            if str(e).startswith(f"config: {field} ") and getattr(args, flag) is not None:
                raise UserInputError(f"--{flag.replace('_', '-')}{str(e)[len('config: ' + field):]}") from e
        raise
