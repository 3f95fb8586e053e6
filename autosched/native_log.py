"""A quiet terminal: TVM's C++ log lines and Python warnings go to a log file, not the user's screen.

TVM's C++ code writes its warnings (``Detected pow(x, y) where y >= 3``, ``Fast mode segfaults ...``) straight
to file descriptor 2, which Python cannot filter. While a command runs, fd 2 points at the log file (worker
processes started meanwhile inherit it); the CLI's own messages keep going to the terminal through a copy of
the original descriptor. Python warnings and library log records go to the same file.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

from autosched.masking import MaskingFormatter

WARNING_MARKS = ("Warning", "warning", "WARNING")
QUIET_ENV = "AUTOSCHED_QUIET"  # "0": the Python API leaves TVM's output on the terminal
_depth = 0  # native_output_to contexts open in this process (an inner one changes nothing)
F = TypeVar("F", bound=Callable[..., Any])


def default_log_path() -> Path:
    """``$XDG_CACHE_HOME/autosched/autosched.log`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autosched" / "autosched.log"


@dataclass
class NativeLog:
    path: Path
    start_offset: int
    n_warnings: int = 0

    def count_warnings(self) -> int:
        """Warning lines written to the log since the command started."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.start_offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return 0
        self.n_warnings = sum(any(m in line for m in WARNING_MARKS) for line in text.splitlines())
        return self.n_warnings


def _terminal_fd() -> int | None:
    """The descriptor behind ``sys.stderr`` if it is the process's fd 2 (not a test's capture buffer)."""
    try:
        return 2 if sys.stderr.fileno() == 2 else None
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return None


@dataclass
class _Redirection:
    """What the first open ``native_output_to`` changed, for the last one to close to put back."""
    state: NativeLog
    log_file: Any
    handler: logging.Handler
    saved_fd: int
    old_stderr: Any

    def undo(self) -> None:
        os.dup2(self.saved_fd, 2)
        os.close(self.saved_fd)
        if sys.stderr is not self.old_stderr:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = self.old_stderr
        logging.captureWarnings(False)
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()
        self.log_file.close()
        self.state.count_warnings()


_lock = threading.Lock()  # guards _depth and _active: threads open and close contexts at once (two first calls
_active: _Redirection | None = None  # of a torch-compiled model, two quiet API calls)


@contextmanager
def native_output_to(path: Path) -> Iterator[NativeLog]:
    """Send fd 2 (C++ logs, also of child processes), Python warnings and log records to ``path``. Contexts nest
    and overlap across threads: the first one open redirects, the last one to close restores (an inner one yields
    a log that counts nothing)."""
    global _depth, _active
    with _lock:
        if _depth:  # already redirected by an outer call (the CLI, an API function calling another, a thread)
            _depth += 1
            state = NativeLog(path, 0)
        else:
            _active = _redirect(path)
            state, _depth = _active.state, 1
    try:
        yield state
    finally:
        with _lock:
            _depth -= 1
            if not _depth and _active is not None:
                _active.undo()
                _active = None


def _redirect(path: Path) -> _Redirection:
    path.parent.mkdir(parents=True, exist_ok=True)
    log_file = open(path, "ab")  # noqa: SIM115 - closed by _Redirection.undo, after fd 2 is restored
    state = NativeLog(path, log_file.tell())
    handler = logging.StreamHandler(io.TextIOWrapper(os.fdopen(os.dup(log_file.fileno()), "wb"), line_buffering=True))
    handler.setFormatter(MaskingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))  # no password
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)
    sys.stderr.flush()
    saved_fd = os.dup(2)
    old_stderr = sys.stderr
    if _terminal_fd() is not None:  # keep the CLI's own messages on the terminal
        sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(saved_fd), "wb"), line_buffering=True, errors="replace")
    os.dup2(log_file.fileno(), 2)
    return _Redirection(state, log_file, handler, saved_fd, old_stderr)


def quiet_api(func: F) -> F:
    """A Python API function that keeps TVM's output off the terminal, as the CLI does: fd 2 and warnings go to
    the log file while it runs, then one line on stderr says how many warning lines went there. Nested calls (and
    calls from the CLI) share the outer redirection (``native_output_to`` counts nothing inside another, so they
    print no line of their own); ``AUTOSCHED_QUIET=0`` turns it off."""

    @wraps(func)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        if os.environ.get(QUIET_ENV, "1") == "0":
            return func(*args, **kwargs)
        path = default_log_path()
        try:
            context = native_output_to(path)
            log = context.__enter__()
        except OSError:  # no writable log file: leave the output where it is
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        finally:
            context.__exit__(None, None, None)
            if log.n_warnings:
                print(f"autosched: {log.n_warnings} warning lines from TVM and libraries written to {path}",
                      file=sys.stderr, flush=True)

    return quiet  # type: ignore[return-value]
