"""How a long command shows its progress: a live bar on stderr (default), nothing (``--quiet``), or one JSON
object per update and one at the end on stdout (``--json``, for scripts and other tools)."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

BAR, QUIET, JSON = "bar", "quiet", "json"


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
