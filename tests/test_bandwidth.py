"""This machine's copy bandwidth and a task's bytes moved: the yardstick of memory-bound kernels."""

from __future__ import annotations

import pytest

from autosched.bandwidth import bytes_moved, copy_bandwidth, dtype_bytes, gbps
from autosched.spaces.settings import settings_for
from autosched.tasks import op_task


def test_copy_bandwidth_is_positive_plausible_and_measured_once():
    rate = copy_bandwidth(1)
    assert 0.5e9 < rate < 2e12  # between an old laptop's DRAM and an HBM GPU's
    assert copy_bandwidth(1) is rate  # cached for the process


def test_bytes_moved_sums_every_buffer():
    assert [dtype_bytes(d) for d in ("float32", "bfloat16", "float8_e4m3fn", "int64", "bool")] == [4, 2, 1, 8, 1]
    assert bytes_moved([((1, 56, 56, 96), "float32"), ((64, 49, 96), "float32")]) == 2 * 56 * 56 * 96 * 4
    assert gbps(2e9, 1.0) == 2.0 and gbps(1.0, float("inf")) != gbps(1.0, float("inf"))  # nan without a latency


def test_a_task_moves_its_inputs_and_outputs(cpu_target):
    task = op_task("elementwise", (64,), cpu_target, settings_for(cpu_target).version)
    specs = task.arg_specs()
    assert task.n_bytes == sum(4 * s[0][0] for s in specs) == bytes_moved(specs)
    assert task.n_bytes == pytest.approx(4 * 64 * len(specs))
