"""The partitioned-concatenation design: where it applies, what it schedules, and that it leaves every other
design (and so every stored record) as it was."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from autosched._tvm import Schedule, Trace, as_python, structural_equal, te, topi, tvm
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target

CHANNELS = (64, 32, 32)


def _concat_bn_relu(channels: tuple[int, ...] = CHANNELS, axis: int = 3) -> tvm.IRModule:
    """DenseNet's concat -> batch norm -> ReLU in NHWC (``axis=3``), as Relax legalises and fuses it."""
    shape = [1, 7, 7, 7]
    xs = []
    for i, c in enumerate(channels):
        shape[axis] = c
        xs.append(te.placeholder(tuple(shape), "float32", name=f"x{i}"))
    cat = topi.concatenate(xs, axis=axis)
    total = sum(channels)
    scale = te.placeholder((total,), "float32", name="scale")
    shift = te.placeholder((total,), "float32", name="shift")

    def bn(*idx):
        c = idx[axis]
        return te.max(cat(*idx) * scale[c] + shift[c], 0.0)

    out = te.compute(cat.shape, bn, name="out")
    return tvm.IRModule({"main": te.create_prim_func([*xs, scale, shift, out])})


def _space(mod: tvm.IRModule, threads: int = 1, partition: bool = True) -> TraceSearchSpace:
    target = make_target("llvm", threads)
    settings = dataclasses.replace(settings_for(target), partition_concats=partition, serial_small=False)  # its own
    return TraceSearchSpace(mod, target, settings)


def _run(sch: Schedule, target, mod: tvm.IRModule, seed: int = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    params = mod["main"].params
    inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in params[:-1]]
    out = tvm.runtime.empty([int(d) for d in params[-1].ty.shape], "float32", tvm.cpu())
    tvm.compile(sch.mod, target=target).mod["main"](*[tvm.runtime.tensor(x) for x in inputs], out)
    return out.numpy(), inputs


def _reference(inputs: list[np.ndarray], axis: int) -> np.ndarray:
    *xs, scale, shift = inputs
    shape = [1] * 4
    shape[axis] = -1
    return np.maximum(np.concatenate(xs, axis=axis) * scale.reshape(shape) + shift.reshape(shape), 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_concat_with_its_batch_norm_gets_a_partitioned_vectorised_design(threads):
    mod = _concat_bn_relu()
    space, without = _space(mod, threads), _space(mod, threads, partition=False)
    assert len(space.designs) == len(without.designs) + 1
    # appended: the rules' designs keep their index, so a stored record replays as it did
    assert [str(d) for d in space.designs[:-1]] == [str(d) for d in without.designs]
    assert space.design_index("concat") == len(space.designs) - 1
    params, sch = space.default_schedule()  # also what compile applies to a group without records
    assert params == {"design": space.design_index("concat")}
    script = sch.mod.script()
    assert "if_then_else" in mod.script() and script.count("T.vectorized(") == len(CHANNELS)
    assert ("T.parallel" in script) == (threads > 1)
    out, inputs = _run(sch, space.target, mod)
    np.testing.assert_allclose(out, _reference(inputs, axis=3), rtol=1e-5, atol=1e-6)  # FMA contraction rounds once
    llvm_ir = tvm.compile(sch.mod, target=space.target).mod.inspect_source("ll")
    assert "<32 x float>" in llvm_ir or "<16 x float>" in llvm_ir


def test_a_concat_along_an_outer_axis_vectorises_each_parts_inner_loop():
    mod = _concat_bn_relu(channels=(3, 5), axis=1)  # rows of 7 x 7 per part
    space = _space(mod, threads=2)
    params, sch = space.default_schedule()
    assert params == {"design": space.design_index("concat")}
    out, inputs = _run(sch, space.target, mod, seed=1)
    np.testing.assert_allclose(out, _reference(inputs, axis=1), rtol=1e-5, atol=1e-6)  # FMA contraction rounds once


def test_the_design_replays_from_its_stored_trace():
    """A record stores the schedule's trace as JSON; compile replays it on a fresh schedule (apply.py)."""
    mod = _concat_bn_relu()
    space = _space(mod)
    _, sch = space.default_schedule()
    stored = json.loads(json.dumps(as_python(sch.trace.as_json(remove_postproc=False))))  # as optuna_strategy does
    fresh = Schedule(space.mod, error_render_level="none")
    Trace.apply_json_to_schedule(stored, fresh)
    assert structural_equal(fresh.mod, sch.mod)


def test_elementwise_work_and_padding_get_no_extra_design():
    x = te.placeholder((1, 8, 8, 16), "float32", name="x")
    relu = te.compute(x.shape, lambda *i: te.max(x(*i), 0.0), name="relu")
    padded = topi.nn.pad(x, [0, 1, 1, 0], [0, 1, 1, 0])
    for out in (relu, padded):
        mod = tvm.IRModule({"main": te.create_prim_func([x, out])})
        assert _space(mod).design_index("concat") is None


def test_the_cpu_space_declares_the_design():
    assert settings_for(make_target("llvm", 1)).partition_concats
