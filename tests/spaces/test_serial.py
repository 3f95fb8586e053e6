"""The serial design for small functions: where it applies, that it runs without the thread pool and computes the
same, that it is told apart from the parallel default, and that it leaves every other design as it was."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from autosched._tvm import te, tvm
from autosched.records import schedule_key
from autosched.spaces.serial import SERIAL_MAX_ITERATIONS, iterations
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target

PARALLEL_LAUNCH = "TVMBackendParallelLaunch"


def _gate(n: int = 512) -> tvm.IRModule:
    """An LSTM step's gate: tanh(sigmoid(a + b)) * a, two blocks of ``n``."""
    a, b = te.placeholder((1, n), "float32", name="a"), te.placeholder((1, n), "float32", name="b")
    s = te.compute((1, n), lambda i, j: te.sigmoid(a[i, j] + b[i, j]), name="s")
    out = te.compute((1, n), lambda i, j: te.tanh(s[i, j]) * a[i, j], name="out")
    return tvm.IRModule({"main": te.create_prim_func([a, b, out])})


def _nhwc_mean(h: int = 4, w: int = 4, c: int = 64) -> tvm.IRModule:
    x = te.placeholder((1, h, w, c), "float32", name="x")
    kh, kw = te.reduce_axis((0, h), "kh"), te.reduce_axis((0, w), "kw")
    red = te.compute((1, 1, 1, c), lambda n, i, j, ch: te.sum(x[n, kh, kw, ch], axis=[kh, kw]), name="red")
    return tvm.IRModule({"main": te.create_prim_func([x, red])})


def _space(mod: tvm.IRModule, threads: int, serial: bool = True) -> TraceSearchSpace:
    target = make_target("llvm", threads)
    return TraceSearchSpace(mod, target, dataclasses.replace(settings_for(target), serial_small=serial))


def _build_and_run(sch, target, mod, rng) -> tuple[str, list[np.ndarray]]:
    built = tvm.compile(sch.mod, target=target)
    args = [tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32"))
            for p in mod["main"].params]
    built["main"](*args)
    return built.mod.inspect_source("ll"), [a.numpy() for a in args]


def test_a_small_gate_gets_a_serial_copy_of_its_default_that_runs_without_the_thread_pool():
    mod = _gate()
    space, without = _space(mod, 2), _space(mod, 2, serial=False)
    assert space.design_index("serial") == len(space.designs) - 1 == len(without.designs)
    # appended: the other designs keep their index, so a stored record replays as it did
    assert [str(d) for d in space.designs[:-1]] == [str(d) for d in without.designs]
    assert space.default_schedule()[0] == without.default_schedule()[0]  # the parallel default stays the default
    (_, parallel), (serial_params, serial) = space.default_schedule(), space.serial_default()
    assert serial_params["design"] == space.design_index("serial")
    # a schedule is known by its decisions: the serial copy's must differ, or it would pass for measured
    assert schedule_key(space.effective_decisions(serial)) != schedule_key(space.effective_decisions(parallel))
    outs = {}
    for name, sch in (("parallel", parallel), ("serial", serial)):
        ll, args = _build_and_run(sch, space.target, mod, np.random.default_rng(0))
        assert (PARALLEL_LAUNCH in ll) == (name == "parallel"), name
        assert re.search(r"<(8|16|32|64) x float>", ll), name  # still vectorised
        outs[name] = args
    a, b, out = outs["serial"]
    expected = np.tanh(1 / (1 + np.exp(-(a + b)))) * a
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs["parallel"][2], expected, rtol=1e-5, atol=1e-6)


def test_a_small_streaming_reduction_gets_a_serial_copy_of_the_streaming_design():
    mod = _nhwc_mean()
    space = _space(mod, 2)
    assert space.source_of(space.design_index("serial")) == space.design_index("streaming") is not None
    params, sch = space.serial_default()
    assert params["design"] == space.design_index("serial")
    ll, (x, red) = _build_and_run(sch, space.target, mod, np.random.default_rng(1))
    assert PARALLEL_LAUNCH not in ll
    np.testing.assert_allclose(red, x.sum(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads,n", [(1, 512), (2, 2 * SERIAL_MAX_ITERATIONS)])
def test_no_serial_copy_on_one_thread_or_above_the_size_limit(threads, n):
    space = _space(_gate(n), threads)
    assert iterations(space.mod) == n  # what is scheduled: fast math inlined the sigmoid into the tanh
    assert space.design_index("serial") is None and space.serial_default() is None
