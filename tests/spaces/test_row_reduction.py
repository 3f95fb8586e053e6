"""The row design for norms and softmaxes, and the rule-based default schedule a task gets without search."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched._tvm import llvm_vector_bits, te, topi, tvm
from autosched.spaces.microkernel import DEFAULT_UNROLL, microkernel_params
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace, streaming_vector
from autosched.targets import make_target
from autosched.tasks import op_task


def _softmax(rows: int = 96, cols: int = 128) -> tvm.IRModule:
    x = te.placeholder((rows, cols), "float32", name="x")
    return tvm.IRModule({"main": te.create_prim_func([x, topi.nn.softmax(x, axis=-1)])})


def _layer_norm(rows: int = 64, cols: int = 768) -> tvm.IRModule:
    x = te.placeholder((rows, cols), "float32", name="x")
    gamma, beta = te.placeholder((cols,), "float32", name="g"), te.placeholder((cols,), "float32", name="b")
    return tvm.IRModule({"main": te.create_prim_func([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, [1])])})


def _space(mod: tvm.IRModule, threads: int, rows: bool = True, rule_defaults: bool = True) -> TraceSearchSpace:
    target = make_target("llvm", threads)
    settings = dataclasses.replace(settings_for(target), row_reductions=rows, rule_defaults=rule_defaults)
    return TraceSearchSpace(mod, target, settings)


def _run(sch, target, arrays: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray:
    out = tvm.runtime.empty(out_shape, "float32", tvm.cpu())
    tvm.compile(sch.mod, target=target).mod["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_softmax_gets_a_row_design_appended_that_computes_it(threads):
    space, without = _space(_softmax(), threads), _space(_softmax(), threads, rows=False)
    assert len(space.designs) == len(without.designs) + 1 and space.design_index("row") == len(space.designs) - 1
    # appended: the rules' designs (and the serial copy's source) keep their meaning for stored records
    assert [str(d) for d in space.designs[:len(without.designs) - (without.design_index("serial") is not None)]] == \
        [str(d) for d in without.designs[:len(without.designs) - (without.design_index("serial") is not None)]]
    params, sch = space.default_schedule()
    assert params["design"] == space.design_index("row")  # the norm's default is its own design
    script = sch.mod.script()
    assert "T.vectorized(16)" in script and ("T.parallel" in script) == (threads > 1)
    x = np.random.default_rng(0).standard_normal((96, 128)).astype("float32") * 4
    want = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(sch, space.target, [x], x.shape), want / want.sum(-1, keepdims=True),
                               rtol=1e-5, atol=1e-7)


def test_a_softmax_over_short_odd_rows_is_one_vector_a_row():
    # Swin's 49-token windows: 16 lanes do not divide 49, and 7-lane vectors ran 2.4x slower than whole rows
    assert [streaming_vector(n) for n in (128, 64, 49, 50, 96, 7, 147)] == [16, 16, 49, 50, 16, 7, 7]
    assert streaming_vector(49, max_innermost=16) == 7 and streaming_vector(49, whole_rows=False) == 7
    space = _space(_softmax(32, 49), 2)
    params, sch = space.default_schedule()
    assert params["design"] == space.design_index("row") and "T.vectorized(49)" in sch.mod.script()
    x = np.random.default_rng(2).standard_normal((32, 49)).astype("float32")
    want = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(sch, space.target, [x], x.shape), want / want.sum(-1, keepdims=True),
                               rtol=1e-5, atol=1e-7)


def test_a_layer_norm_gets_the_row_design_as_its_default():
    space = _space(_layer_norm(), 2)
    params, sch = space.default_schedule()
    assert params["design"] == space.design_index("row")
    rng = np.random.default_rng(1)
    x, g, b = (rng.standard_normal(s).astype("float32") for s in ((64, 768), (768,), (768,)))
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(_run(sch, space.target, [x, g, b], x.shape), want, rtol=1e-4, atol=1e-5)


def test_a_matmul_without_records_gets_a_micro_kernel_as_its_default(cpu_target):
    """The register-blocked micro-kernel (the first seed, unrolled less) instead of the first design's randomly
    sampled tiles: what a task the search never reaches gets, and what compile applies without records."""
    task = op_task("dense", (128, 256, 384), cpu_target, settings_for(cpu_target).version)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target))
    params, sch = space.default_schedule()
    (seed, *_) = microkernel_params(space, llvm_vector_bits(cpu_target), unroll=DEFAULT_UNROLL)
    assert params == seed
    (unroll,) = [k for k in space.categorical_knobs(params["design"]) if DEFAULT_UNROLL in k.choices]
    assert unroll.choices[params[unroll.name]] == DEFAULT_UNROLL
    rng = np.random.default_rng(2)
    a, w, bias = (rng.standard_normal(s).astype("float32") for s in ((128, 384), (256, 384), (256,)))
    np.testing.assert_allclose(_run(sch, cpu_target, [a, w, bias], (128, 256)), np.maximum(a @ w.T + bias, 0),
                               rtol=1e-4, atol=1e-4)  # dense + bias + relu
    plain = TraceSearchSpace(task.mod, cpu_target, dataclasses.replace(settings_for(cpu_target), rule_defaults=False))
    assert plain.default_schedule()[0] == plain.default_params(0)  # off: the first design's own decisions


def test_the_cpu_space_declares_rule_defaults_and_the_row_design():
    settings = settings_for(make_target("llvm", 1))
    assert settings.rule_defaults and settings.row_reductions
