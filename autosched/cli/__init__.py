"""The command line: ``autosched tune | inspect | compile | run | doctor | show | report | export | import |
train-cost-model``. The CLI owns all output; each command is a thin layer over ``autosched.api``.

``main`` parses (``parser.py``), sends TVM's own output to the log file and runs the command of one module per
family: ``operator.py`` (tune one operator or tensor program), ``model.py`` (tune, inspect, compile and run a
model, or an artifact), ``doctor.py`` (this machine, and which records apply to it), ``database.py`` (show,
report, export, import, train a cost model); ``output.py`` prints.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autosched.cli.parser import build_parser
from autosched.errors import AutoschedError, UserInputError
from autosched.masking import MaskingFormatter, mask_argv, mask_secrets

EXIT_USER_ERROR = 2


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console

    err = Console(stderr=True)
    stopped = _stop_on_sigterm_as_on_ctrl_c()
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = build_parser().parse_args(argv)
        args.argv = mask_argv(argv)  # recorded by commands that write artefacts (the command that rebuilds them)
        return _run_quietly(args, err)
    except UserInputError as e:
        err.print(f"autosched: error: {_one_line(e)}", style="red", highlight=False, soft_wrap=True, markup=False)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        err.print(f"autosched: {'stopped (SIGTERM)' if stopped else 'interrupted'}; every fully measured candidate "
                  "is in the database")
        return 128 + (signal.SIGTERM if stopped else signal.SIGINT)
    except AutoschedError as e:
        err.print(f"autosched: error: {_one_line(e)}", style="red", highlight=False, soft_wrap=True, markup=False)
        return 1
    except Exception as e:  # a bug or an unforeseen TVM failure: one line here, the traceback in the log
        from autosched.db.sql import database_failure
        from autosched.graph.passes import failure_reason

        reason = database_failure(e)  # the database failed inside a library (Optuna's storage): disk full, ...
        if reason:
            err.print(f"autosched: error: {mask_secrets(reason)}", style="red", highlight=False, soft_wrap=True,
                      markup=False)
            return EXIT_USER_ERROR

        reason = mask_secrets(failure_reason(e))
        err.print(f"autosched: internal error: {reason} (traceback in the log file; please report it)",
                  style="red", highlight=False, soft_wrap=True, markup=False)
        return 1


def _stop_on_sigterm_as_on_ctrl_c() -> list[int]:
    """SIGTERM (``timeout``, systemd, Kubernetes stopping a tuner) handled as Ctrl-C: whatever handles SIGINT then
    (a batch being saved defers it, ``tune.py``) runs, so the in-flight trial is marked, the database left whole and
    the scratch folders removed. A terminal's Ctrl-C reaches the worker processes too (the whole foreground group),
    SIGTERM only this one: it is passed on to them as SIGINT (not to the scratch reaper, in a session of its own).
    Returns a list that holds the signal once one came (main thread only)."""
    stopped: list[int] = []

    def on_sigterm(signum: int, frame: Any) -> None:
        import psutil

        stopped.append(signum)
        session = os.getsid(0)
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getsid(child.pid) == session:
                    child.send_signal(signal.SIGINT)
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread (main() called from a thread): left as it is
        signal.signal(signal.SIGTERM, on_sigterm)
    return stopped


def _one_line(e: BaseException) -> str:
    """The message on one line, whatever the user's input it quotes holds (newlines, carriage returns)."""
    return mask_secrets(" ".join(str(e).splitlines()))


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
        console.setFormatter(MaskingFormatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(console)
    try:
        return _command(args)(args)
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


def _command(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The function that runs ``args.command``."""
    from autosched.cli import database, model

    if args.command == "tune":
        return _tune
    if args.command == "doctor":
        from autosched.cli import doctor

        return doctor.cmd_doctor
    family = model if args.command in ("inspect", "compile", "run") else database
    return getattr(family, f"cmd_{args.command.replace('-', '_')}")


def _tune(args: argparse.Namespace) -> int:
    """``tune``: a MODEL, one operator (``--op``) or a tensor program (``--func``; a Relax module is a model)."""
    from autosched.cli import model, operator

    given = [flag for flag, value in (("a MODEL", args.model), ("--op", args.op), ("--func", args.func)) if value]
    if len(given) > 1:
        raise UserInputError(f"give either a MODEL or --op or --func, not {' and '.join(given)}")
    if getattr(args, "shape_buckets", None) and not args.model:
        raise UserInputError("--shape-buckets goes with a MODEL (an ONNX file with symbolic dimensions)")
    if getattr(args, "precision", "fp32") != "fp32" and not args.model:
        raise UserInputError("--precision goes with a MODEL: it is a graph rewrite (tune a bf16 operator with --func)")
    if args.model:
        return model.cmd_tune_model(args)
    if args.func:
        if args.shape:
            raise UserInputError("--shape goes with --op; a --func program has its own shapes")
        from autosched.programs import is_relax_module, load_program

        program, name = load_program(args.func)
        if is_relax_module(program):
            from autosched.graph.frontends import load_model

            args.model = load_model(program, name=name)
            return model.cmd_tune_model(args)
        return operator.cmd_tune_program(args, program, name)
    if not args.op or not args.shape:
        raise UserInputError("nothing to tune: give a MODEL (an .onnx file or zoo:NAME), --op OP --shape DIMS "
                             "or --func PATH.py:NAME")
    return operator.cmd_tune_operator(args)


__all__ = ["EXIT_USER_ERROR", "build_parser", "main"]
