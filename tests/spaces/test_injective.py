"""The injective (streaming) design: where it applies, what it schedules, that its default computes the right
values, and that it leaves the other designs (and so every stored record) as they were."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched._tvm import Schedule, te, topi, tvm
from autosched.spaces.injective import injective_design
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target


def _func(inputs: list[te.Tensor], out: te.Tensor) -> tvm.IRModule:
    return tvm.IRModule({"main": te.create_prim_func([*inputs, out])})


def _window_partition() -> tvm.IRModule:
    """Swin's window partition: 1x56x56x96 -> 64 windows of 7x7 tokens."""
    x = te.placeholder((1, 56, 56, 96), "float32", name="x")
    y = topi.reshape(topi.transpose(topi.reshape(x, (1, 8, 7, 8, 7, 96)), (0, 1, 3, 2, 4, 5)), (64, 49, 96))
    return _func([x], y)


def _nchw_to_nhwc() -> tvm.IRModule:
    x = te.placeholder((1, 32, 16, 16), "float32", name="x")
    return _func([x], topi.transpose(x, (0, 2, 3, 1)))


def _broadcast_multiply() -> tvm.IRModule:
    x, s = te.placeholder((2, 8, 16, 16), "float32", name="x"), te.placeholder((2, 8, 1, 1), "float32", name="s")
    return _func([x, s], topi.multiply(x, s))


def _reference(name: str, inputs: list[np.ndarray]) -> np.ndarray:
    x = inputs[0]
    if name == "window":
        return x.reshape(1, 8, 7, 8, 7, 96).transpose(0, 1, 3, 2, 4, 5).reshape(64, 49, 96)
    return x.transpose(0, 2, 3, 1)


def _space(mod: tvm.IRModule, threads: int = 2, on: bool = True) -> TraceSearchSpace:
    target = make_target("llvm", threads)
    settings = dataclasses.replace(settings_for(target), stream_injective=on, serial_small=False)
    return TraceSearchSpace(mod, target, settings)


def _run(sch: Schedule, target, mod: tvm.IRModule) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    params = mod["main"].params
    inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in params[:-1]]
    out = tvm.runtime.empty([int(d) for d in params[-1].ty.shape], "float32", tvm.cpu())
    tvm.compile(sch.mod, target=target).mod["main"](*[tvm.runtime.tensor(x) for x in inputs], out)
    return out.numpy(), inputs


SERIAL, PARALLEL, VECTORIZED = 0, 1, 2  # tirx.ForKind


def _loops(sch: Schedule) -> list[tuple[int, int]]:
    """(extent, kind) of the output block's loops, outermost first."""
    block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    return [(int(sch.get(loop).extent), int(sch.get(loop).kind)) for loop in sch.get_loops(block)]


@pytest.mark.parametrize("name, build", [("window", _window_partition), ("nhwc", _nchw_to_nhwc)])
def test_the_default_is_the_injective_design_and_computes_the_right_values(name, build):
    mod = build()
    space = _space(mod)
    params, sch = space.default_schedule()
    assert params["design"] == space.design_index("injective")
    got, inputs = _run(sch, space.target, mod)
    np.testing.assert_array_equal(got, _reference(name, inputs))


def test_a_window_partition_streams_whole_runs_of_its_channels():
    # the rules fused 64x49x96 into one loop and vectorised 64 of it: vectors across rows, a gather per lane
    sch = _space(_window_partition()).default_schedule()[1]
    loops = _loops(sch)
    assert loops[-1] == (48, VECTORIZED) and loops[0][1] == PARALLEL and len(loops) == 2


def test_a_transpose_of_the_contiguous_axis_is_tiled_both_ways():
    # x[n, c, h, w] -> y[n, h, w, c]: x is contiguous along w, y along c; a 16 x 16 tile of (w, c)
    sch = _space(_nchw_to_nhwc()).default_schedule()[1]
    assert _loops(sch)[-2:] == [(16, SERIAL), (16, VECTORIZED)]


def test_one_thread_has_no_parallel_loop():
    sch = _space(_window_partition(), threads=1).default_schedule()[1]
    assert all(kind != PARALLEL for _, kind in _loops(sch))


def test_elementwise_work_and_broadcasts_read_in_order_keep_the_rules_design():
    # the rules' fused vectors stay contiguous there: nothing to gain, so their defaults stay as they were
    mod = _broadcast_multiply()
    assert injective_design(mod, make_target("llvm", 2)) is None
    assert _space(mod).design_index("injective") is None


def test_reductions_concatenations_and_odd_rows_have_no_injective_design():
    target = make_target("llvm", 2)
    x = te.placeholder((64, 49), "float32", name="x")
    k = te.reduce_axis((0, 49), name="k")
    row_sum = te.compute((64,), lambda i: te.sum(x[i, k], axis=k), name="row_sum")
    a, b = te.placeholder((4, 8), "float32", name="a"), te.placeholder((4, 8), "float32", name="b")
    odd = _func([x], topi.transpose(x, (1, 0)))  # 64x49 -> 49x64 is streamed; 49x64 -> 64x49 rows of 49 are not
    y = te.placeholder((49, 64), "float32", name="y")
    assert injective_design(_func([y], topi.transpose(y, (1, 0))), target) is None
    assert injective_design(odd, target) is not None
    for mod in (_func([x], row_sum), _func([a, b], topi.concatenate([a, b], axis=1))):
        assert injective_design(mod, target) is None


def test_the_other_designs_keep_their_index():
    mod = _window_partition()
    with_it, without = _space(mod), _space(mod, on=False)
    assert len(with_it.designs) == len(without.designs) + 1 == with_it.design_index("injective") + 1
    assert [str(t) for t in with_it.designs[:-1]] == [str(t) for t in without.designs]
