"""Timing Python calls the way a user makes them: warm-up, rounds of repeated calls, contenders interleaved.

Every contender (autosched's compiled model, ONNX Runtime's ``session.run``, a PyTorch module) is timed
through the same kind of call with the same timer, one round of each in turn, so a slow spell of a shared
machine hits all of them alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def time_callable(fn: Callable[[], object], repeat: int = 5, min_repeat_s: float = 0.04) -> float:
    """Median seconds per call over ``repeat`` rounds, each running at least ``min_repeat_s``."""
    fn()  # warm-up
    return statistics.median(_round(fn, min_repeat_s) for _ in range(repeat))


def time_interleaved(calls: dict[str, Callable[[], object]], repeat: int = 7,
                     min_round_s: float = 0.1) -> dict[str, list[float]]:
    """Seconds per call of each contender: ``repeat`` rounds, each contender once per round in turn.

    Each contender's timed calls follow one untimed call of its own: a thread pool keeps spinning for a while after
    its call returns (ONNX Runtime's intra-op workers, OpenMP's), and on a machine with few cores the next
    contender's first call waits for them (DenseNet-121 at 2 threads right after ONNX Runtime: 69 ms instead of 31).
    The untimed call absorbs that, so each contender is timed with its own threads only, its peers at their
    default settings."""
    for fn in calls.values():
        fn()  # warm-up (first-call allocations, lazy initialisation)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeat):
        for name, fn in calls.items():
            fn()  # settle: the previous contender's spinning workers finish on this call, untimed
            samples[name].append(_round(fn, min_round_s))
    return samples


def _round(fn: Callable[[], object], min_s: float) -> float:
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_s:
            return elapsed / n
