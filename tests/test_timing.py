"""Interleaved timing: each contender timed with its own threads only."""

from __future__ import annotations

import statistics
import time

from autosched.timing import time_interleaved


def test_a_contender_is_not_timed_while_the_previous_ones_workers_still_spin():
    """A call right after the other contender's is slow (its workers still hold the cores), as ONNX Runtime's
    spinning intra-op pool makes the next call on 2 cores; the samples are the contenders' own speed."""
    last = {"who": None}

    def contender(name: str):
        def call() -> None:
            time.sleep(0.03 if last["who"] not in (None, name) else 0.001)
            last["who"] = name
        return call

    samples = time_interleaved({"a": contender("a"), "b": contender("b")}, repeat=5, min_round_s=0.0)
    for name in ("a", "b"):
        assert len(samples[name]) == 5
        assert statistics.median(samples[name]) < 0.015, samples[name]
