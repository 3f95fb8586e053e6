"""Scratch folders that never outlive their process, and worker processes that die with their parent.

A tuner writes built libraries and ``io-*.npz`` files (the model's weights) into scratch folders, and runs
candidates in worker processes. Stopped the usual ways (Ctrl-C, SIGTERM: ``cli`` turns it into Ctrl-C) it removes
them itself. Killed (``kill -9``, the OOM killer) it cannot, so:

- every scratch folder made by ``scratch_dir`` is also named to a **reaper**, a small process of its own session
  (a terminal's Ctrl-C does not reach it) started at the first folder, reading their paths from a pipe. When the
  pipe closes (the tuner exited or died: the kernel closes it either way) it removes whatever of them is left, then
  exits. It runs the Python standard library only (``REAPER``), nothing of autosched or TVM.
- every worker process asks the kernel to kill it when its parent dies (``die_with_parent``, Linux's
  ``PR_SET_PDEATHSIG``), even while it runs a hanging kernel.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator

log = logging.getLogger("autosched.scratch")

REAPER = r"""
import os, shutil, sys
paths = []
for line in sys.stdin:
    paths.append(line.rstrip("\n"))
for path in paths:
    if os.path.isdir(path) and os.path.basename(path).startswith("autosched-"):
        shutil.rmtree(path, ignore_errors=True)
"""

_reaper: subprocess.Popen | None = None
_reaper_pid = 0  # the process that started it (a forked child must start its own)
_lock = threading.Lock()


def _tell_reaper(path: str) -> None:
    """Name ``path`` to this process's reaper (started at the first call); a reaper that cannot start or has gone
    costs only the clean-up after a kill (logged once)."""
    global _reaper, _reaper_pid
    with _lock:
        try:
            if _reaper is None or _reaper_pid != os.getpid() or _reaper.poll() is not None:
                _reaper = subprocess.Popen([sys.executable, "-S", "-c", REAPER], stdin=subprocess.PIPE,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True, text=True, close_fds=True)
                _reaper_pid = os.getpid()
            assert _reaper.stdin is not None
            _reaper.stdin.write(path + "\n")
            _reaper.stdin.flush()
        except (OSError, ValueError) as err:
            log.info("scratch reaper unavailable (%s): a killed tuner would leave %s behind", err, path)


@contextlib.contextmanager
def scratch_dir(kind: str = "") -> Iterator[str]:
    """A new folder ``autosched-<kind>-*`` in the temporary directory, removed when the context ends, or by the
    reaper if this process is killed first."""
    with tempfile.TemporaryDirectory(prefix=f"autosched-{kind}-" if kind else "autosched-") as path:
        _tell_reaper(path)
        yield path


class ScratchDir:
    """``scratch_dir`` as an object (``.name``, ``.cleanup()``), for owners that close it themselves."""

    def __init__(self, kind: str = ""):
        self._context = scratch_dir(kind)
        self.name = self._context.__enter__()

    def cleanup(self) -> None:
        if self._context is not None:
            context, self._context = self._context, None
            context.__exit__(None, None, None)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """In a worker process: be killed (SIGKILL) as soon as the process that started it dies, whatever this one
    is doing; and exit now if it has already died. Linux only (elsewhere a worker notices between jobs)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call: nobody would kill this one
        os._exit(0)
