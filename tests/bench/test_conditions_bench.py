"""bench/conditions.py: the rank agreement of an alone timing with the in-model one."""

from __future__ import annotations

import pytest


def test_the_rank_correlation_of_two_timings_of_the_same_schedules(load_bench):
    bench = load_bench("conditions")
    assert bench.spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert bench.spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert bench.spearman([1.0, 2.0], [2.0, 1.0]) is None  # two schedules: no ranking to speak of
