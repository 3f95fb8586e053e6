"""The streaming design for reductions along a kept axis: where it applies, what it schedules, and that it leaves
every other design (and so every stored record) as it was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched._tvm import te, tvm
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target


def _nhwc_mean(h: int = 28, w: int = 28, c: int = 64) -> tvm.IRModule:
    """A global average pool of an NHWC tensor, as TVM lowers ``mean(x, axis=[1, 2], keepdims=True)``."""
    x = te.placeholder((1, h, w, c), "float32", name="x")
    kh, kw = te.reduce_axis((0, h), "kh"), te.reduce_axis((0, w), "kw")
    red = te.compute((1, 1, 1, c), lambda n, a, b, ch: te.sum(x[n, kh, kw, ch], axis=[kh, kw]), name="red")
    out = te.compute((1, 1, 1, c), lambda n, a, b, ch: red[n, a, b, ch] / float(h * w), name="out")
    return tvm.IRModule({"main": te.create_prim_func([x, out])})


def _row_sum(n: int = 64, k: int = 768) -> tvm.IRModule:
    """A reduction along the innermost axis (layer norm's, softmax's): already streams, no extra design."""
    x = te.placeholder((n, k), "float32", name="x")
    r = te.reduce_axis((0, k), "r")
    return tvm.IRModule({"main": te.create_prim_func([x, te.compute((n,), lambda i: te.sum(x[i, r], axis=r))])})


def _space(mod: tvm.IRModule, threads: int, stream: bool = True) -> TraceSearchSpace:
    target = make_target("llvm", threads)
    settings = dataclasses.replace(settings_for(target), stream_reductions=stream, serial_small=False)  # its own
    return TraceSearchSpace(mod, target, settings)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_mean_over_h_and_w_of_nhwc_gets_a_design_that_streams_the_channels(threads):
    space = _space(_nhwc_mean(), threads)
    without = _space(_nhwc_mean(), threads, stream=False)
    assert len(space.designs) == len(without.designs) + 1
    # appended: the rules' designs keep their index, so a stored record replays as it did
    assert [str(d) for d in space.designs[:-1]] == [str(d) for d in without.designs]
    design = len(space.designs) - 1
    (knob,) = space.knobs(design)  # the vector width
    params = {**space.default_params(design), knob: 4}  # the 5th divisor of 64: 16 lanes
    sch = space.apply(params)
    script = sch.mod.script()
    update = script[script.index('T.sblock("red_update")') - 400:script.index('T.sblock("red_update")')]
    loops = [line.strip() for line in update.splitlines() if line.strip().startswith("for ")]
    assert "T.grid(28, 28)" in loops[-2] and "T.vectorized(16)" in loops[-1], loops  # kh, kw outside, c inside
    assert ("T.parallel" in script) == (threads > 1)
    x = np.random.default_rng(0).standard_normal((1, 28, 28, 64)).astype("float32")
    out = tvm.runtime.empty((1, 1, 1, 64), "float32", tvm.cpu())
    tvm.compile(sch.mod, target=space.target).mod["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), x.mean(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-6)
    llvm_ir = tvm.compile(sch.mod, target=space.target).mod.inspect_source("ll")
    assert "fadd <16 x float>" in llvm_ir


def test_a_reduction_along_the_innermost_axis_or_on_a_gpu_gets_no_extra_design():
    assert len(_space(_row_sum(), 1).designs) == len(_space(_row_sum(), 1, stream=False).designs)
    short = _nhwc_mean(c=4)  # too few channels for a vector
    assert len(_space(short, 1).designs) == len(_space(short, 1, stream=False).designs)


def test_the_cpu_space_declares_the_streaming_design():
    assert settings_for(make_target("llvm", 1)).stream_reductions


def test_the_default_schedule_is_the_streaming_design_with_16_lanes():
    """What compile applies to a reduction without records, and what tuning measures first as its default."""
    space = _space(_nhwc_mean(c=96), 1)
    params, sch = space.default_schedule()
    assert params["design"] == space.design_index("streaming") == len(space.designs) - 1
    assert "T.vectorized(16)" in sch.mod.script()
    assert _space(_row_sum(), 1).default_schedule()[0]["design"] == 0  # elsewhere the rules' first design
