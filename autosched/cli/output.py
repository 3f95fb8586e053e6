"""What the command line prints: its two consoles (results on stdout, progress and notes on stderr), number
formats, and how a long command shows its progress: a live bar on stderr (default), nothing (``--quiet``), or
one JSON object per update and one at the end on stdout (``--json``, for scripts and other tools)."""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from autosched.bandwidth import gbps  # noqa: F401  (re-exported: the commands' GB/s)

BAR, QUIET, JSON = "bar", "quiet", "json"

WIDTH = shutil.get_terminal_size((140, 24)).columns
out = Console(highlight=False, width=WIDTH)  # results
err = Console(stderr=True, highlight=False, width=WIDTH)  # progress, notes and errors


def fmt_s(seconds: float) -> str:
    """A latency: ``1.234 ms`` or ``12.3 us``; ``-`` for none."""
    if seconds == float("inf") or seconds != seconds:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} us"


def gflops(flops: float, seconds: float) -> str:
    return f"{flops / seconds / 1e9:.1f}" if 0 < seconds < float("inf") else "-"


def fmt_rate(gb_per_s: float) -> str:
    """GB/s: ``12.3``; ``-`` for none."""
    return f"{gb_per_s:.1f}" if gb_per_s == gb_per_s else "-"


def of_copy(gb_per_s: float, copy_Bps: float | None) -> str:
    """A rate as a share of the copy bandwidth (bytes/s): ``37 %``; ``-`` for none."""
    return f"{gb_per_s * 1e9 / copy_Bps:.0%}" if copy_Bps and gb_per_s == gb_per_s else "-"


def note(text: str) -> None:
    """Something the user should know, in yellow on stderr (a rewrite the model went without, ...)."""
    err.print(text, style="yellow", highlight=False, soft_wrap=True)


class Steps:
    """The API's ``on_step`` for a command: each step shown as ``step`` shows it; ``progress(detail)`` updates the
    step running now (the API's ``on_progress`` of a build: "12/40 groups")."""

    def __init__(self, mode: str):
        self.mode = mode
        self._update: Callable[[str], None] = lambda detail: None

    @contextmanager
    def __call__(self, description: str) -> Iterator[Callable[[str], None]]:
        with step(self.mode, err, description) as update:
            self._update = update
            try:
                yield update
            finally:
                self._update = lambda detail: None

    def progress(self, detail: str) -> None:
        self._update(detail)


def mode_of(args: Any) -> str:
    return JSON if getattr(args, "json", False) else QUIET if getattr(args, "quiet", False) else BAR


@contextmanager
def progress_display(mode: str, bar_factory: Any, description: str, total: int | None,
                     **fields: Any) -> Iterator[Any]:
    """Yields ``update(completed, **fields)``. ``bar_factory()`` makes the rich ``Progress`` for ``BAR``."""
    if mode == BAR:
        with bar_factory() as bar:
            bar_id = bar.add_task(description, total=total, **fields)
            yield lambda completed, **f: bar.update(bar_id, completed=completed, **f)
        return
    if mode == JSON:
        yield lambda completed, **f: emit({"event": "progress", "task": description, "completed": completed,
                                           "total": total, **f})
        return
    yield lambda completed, **f: None


def emit(obj: dict[str, Any]) -> None:
    """One JSON object on one line of stdout (non-finite numbers as null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in obj.items()}
    sys.stdout.write(json.dumps(clean, default=str) + "\n")
    sys.stdout.flush()


@contextmanager
def step(mode: str, console: Any, description: str) -> Iterator[Any]:
    """One long step before or after tuning (import, graph rewrites, task extraction, the build): a spinner with
    the time so far while it runs, gone when it ends (``BAR``, on a terminal); one JSON object at its end
    (``JSON``). Yields ``update(detail)`` for steps that can say how far they are ("12/40 groups")."""
    start = time.perf_counter()
    if mode == BAR:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                      transient=True) as bar:
            bar_id = bar.add_task(f"{description} ...", total=None)
            yield lambda detail: bar.update(bar_id, description=f"{description} ... {detail}")
        return
    yield lambda detail: None
    if mode == JSON:
        emit({"event": "step", "step": description, "elapsed_s": time.perf_counter() - start})
