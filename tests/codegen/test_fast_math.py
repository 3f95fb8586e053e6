"""The fast-math rewrite: accuracy against float64 numpy/scipy, vector machine code, replay, and what it gains."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from autosched._tvm import s_tir, structural_equal, te, tirx, tvm
from autosched.apply import schedule_from_record
from autosched.codegen.fast_math import FAST_OPS, rewrite
from autosched.errors import IncompatibleArtefactError
from autosched.paths import data_dir
from autosched.records import Status, TuningRecord
from autosched.spaces.settings import load_settings, settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import op_task

FLT_MIN, FLT_MAX = 1.1754944e-38, 3.4028235e38
N = 1 << 18
SPECIALS = [0.0, -0.0, 1e-30, -1e-30, 3e-4, -5e-4, 1.0, -1.0, 3.9, 4.5, 7.9, 9.0, 87.3, -87.3, 88.72, 88.73, 89.0,
            -103.0, -104.0, -110.0, 1e30, -1e30, np.inf, -np.inf, np.nan]
# op -> (TE function, float64 reference, max relative error, max absolute error where |f| <= 1): fast_math.py
BOUNDS = {
    "exp": (te.exp, np.exp, 2e-7, 2e-7),
    "sigmoid": (te.sigmoid, special.expit, 3e-7, 3e-7),
    "tanh": (te.tanh, np.tanh, 4e-7, 4e-7),
    "erf": (te.erf, special.erf, 5e-7, 5e-7),
    "pow": (lambda x: te.power(x, tirx.const(3.0, "float32")), lambda x: x**3, 2.5e-7, 2.5e-7),
}


def _elementwise(op: str, n: int, fast: bool = True, lanes: int = 16):
    x = te.placeholder((n,), "float32", name="X")
    y = te.compute((n,), lambda i: BOUNDS[op][0](x[i]), name="Y")
    mod = tvm.IRModule({"main": te.create_prim_func([x, y])})
    sch = s_tir.Schedule(rewrite(mod, [op]) if fast else mod)
    (loop,) = sch.get_loops("Y")
    sch.vectorize(sch.split(loop, [None, lanes])[1])
    return sch.mod


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    tiny = np.geomspace(1e-7, 1.0, N // 4)
    parts = [SPECIALS, np.linspace(-110, 110, N), np.linspace(-5, 5, N), tiny, -tiny, rng.uniform(-120, 120, N // 4)]
    x = np.concatenate([np.asarray(p, np.float32) for p in parts])
    return x[: len(x) // 16 * 16]


def _run(mod, x: np.ndarray, target) -> np.ndarray:
    out = tvm.runtime.empty(x.shape, "float32", tvm.cpu())
    tvm.compile(mod, target=target).mod["main"](tvm.runtime.tensor(x), out)
    return out.numpy()


@pytest.mark.parametrize("op", sorted(BOUNDS))
def test_accuracy_within_the_documented_bound(op, cpu_target):
    x = _inputs()
    got = _run(_elementwise(op, len(x)), x, cpu_target).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want = BOUNDS[op][1](x.astype(np.float64))
    _, _, max_rel, max_abs = BOUNDS[op]
    normal = (np.abs(want) >= FLT_MIN) & (np.abs(want) <= FLT_MAX)
    rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
    assert rel.max() <= max_rel, f"x = {x[normal][rel.argmax()]}"
    small = np.abs(want) <= 1
    assert np.abs(got[small] - want[small]).max() <= max(max_abs, 2e-45)  # exp: subnormal results too
    with np.errstate(over="ignore"):
        limit = want.astype(np.float32)  # overflow -> inf, NaN -> NaN, as numpy's float32 result
    odd = ~np.isfinite(limit)
    np.testing.assert_array_equal(got[odd], limit[odd])


def test_rewrite_leaves_other_dtypes_exponents_and_functions_alone():
    x64 = te.placeholder((8,), "float64", name="X")
    mod64 = tvm.IRModule({"main": te.create_prim_func([x64, te.compute((8,), lambda i: te.exp(x64[i]))])})
    assert "T.exp(" in rewrite(mod64, ["exp"]).script()
    x = te.placeholder((8,), "float32", name="X")
    y = te.compute((8,), lambda i: te.power(x[i], tirx.const(2.5, "float32")) + te.log(x[i]))
    mod = tvm.IRModule({"main": te.create_prim_func([x, y])})
    assert rewrite(mod, list(FAST_OPS)) is mod  # nothing to rewrite: the same module, not a reparsed copy
    assert "T.pow(" in rewrite(tvm.IRModule({"main": te.create_prim_func(
        [x, te.compute((8,), lambda i: te.power(x[i], tirx.const(2.5, "float32")) + te.exp(x[i]))])}),
        ["exp", "pow"]).script()


def test_the_rewrite_of_a_same_structure_module_keeps_its_own_names():
    def softplus(x_name: str, y_name: str):
        x = te.placeholder((64,), "float32", name=x_name)
        y = te.compute((64,), lambda i: te.log(te.exp(x[i]) + tirx.const(1.0, "float32")), name=y_name)
        return tvm.IRModule({"main": te.create_prim_func([x, y])})

    first, second = softplus("lv7", "lv7_out"), softplus("lv8", "lv8_out")
    assert structural_equal(first, second)  # what a cache keyed on structure alone would mix up
    rewrite(first, ["exp"])
    again = rewrite(second, ["exp"])
    assert "lv8_out" in again.script() and "lv7" not in again.script()
    s_tir.Schedule(again).get_sblock("lv8_out")  # a trace recorded on this model finds its blocks by name


def test_a_rewritten_producer_inlined_into_a_rewritten_consumer_stays_well_formed(cpu_target):
    """tanh(sigmoid(x)), as in an LSTM cell: the sigmoid (with Lets of its own) is inlined into the tanh, which
    reads its input more than once; each read must not copy the sigmoid's Lets (one variable defined twice is an
    ill-formed function: no design space, the group ran untuned)."""
    x = te.placeholder((64,), "float32", name="X")
    s = te.compute((64,), lambda i: te.sigmoid(x[i]), name="S")
    y = te.compute((64,), lambda i: te.tanh(s[i]), name="Y")
    fast = rewrite(tvm.IRModule({"main": te.create_prim_func([x, y])}), ["sigmoid", "tanh"])
    sch = s_tir.Schedule(fast)  # raised "multiple definitions of exp_xc" (a schedule checks well-formedness)
    assert len(sch.get_child_blocks(sch.get_sblock("root"))) == 1  # the sigmoid inlined into the tanh
    space = TraceSearchSpace(fast, cpu_target, settings_for(cpu_target))
    xs = np.linspace(-8, 8, 64, dtype=np.float32)
    np.testing.assert_allclose(_run(space.apply(space.default_params(0)).mod, xs, cpu_target),
                               np.tanh(special.expit(xs)), rtol=1e-6)


def _has_avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not _has_avx512(), reason="needs an AVX-512 CPU (zmm registers)")
def test_generated_assembly_is_vector_exp_code_on_zmm(cpu_target):
    asm = tvm.compile(_elementwise("exp", 256), target=cpu_target).mod.inspect_source("asm")
    for instruction in ("vrndscaleps", "vfmadd", "vcvttps2dq", "vpslld"):  # floor, polynomial, 2^m
        assert re.search(rf"\b{instruction}\w*\s+[^\n]*%zmm", asm), instruction  # on Intel too (host_features)
    assert not re.search(r"call\w*\s+[^\n]*exp", asm)
    libm = tvm.compile(_elementwise("exp", 256, fast=False), target=cpu_target).mod.inspect_source("asm")
    assert re.search(r"call\w*\s+[^\n]*expf", libm)  # why the rewrite exists: one libm call per lane


def test_space_schedules_the_rewritten_function_and_records_replay_on_it(cpu_target):
    settings = settings_for(cpu_target)
    assert "exp" in settings.fast_math
    task = op_task("softmax", (8, 64), cpu_target, settings.version)
    space = TraceSearchSpace(task.mod, cpu_target, settings)
    assert "T.exp(" in task.mod.script() and "T.exp(" not in space.mod.script()
    sch = space.apply(space.default_params(0))
    record = TuningRecord(task.key, task.target_json, {}, [], sch.trace.as_json(remove_postproc=False), Status.OK,
                          [1e-3], None, "test", "test", settings.version)
    assert structural_equal(schedule_from_record(task.mod, record).mod, sch.mod)
    older = dataclasses.replace(record, space_version=settings.version - 1)  # before the rewrite: as stored
    assert "T.exp(" in schedule_from_record(task.mod, older).mod.script()


def test_unknown_fast_math_op_is_refused(tmp_path):
    text = (data_dir("search_spaces") / "cpu.toml").read_text()
    path = tmp_path / "cpu.toml"
    path.write_text(re.sub(r"(?m)^ops = \[.*\]$", 'ops = ["exp", "cos"]', text))
    with pytest.raises(IncompatibleArtefactError, match="fast_math ops \\['cos'\\]"):
        load_settings(path)


@pytest.mark.slow
@pytest.mark.parametrize("op,shape", [("softmax", (32, 768)), ("gelu_tanh", (32, 768))])
def test_tuning_beats_the_libm_space(monkeypatch, cpu_target, op, shape):
    """The same search with and without the rewrite (GELU's space has a single schedule: nothing to search)."""
    from autosched import session as session_module
    from autosched.config import TuneConfig
    from autosched.db import open_database

    new = settings_for(cpu_target)
    old = dataclasses.replace(new, fast_math=(), version=new.version - 1)
    best = {}
    for settings in (old, new):
        monkeypatch.setattr(session_module, "settings_for", lambda target, s=settings: s)
        task = op_task(op, shape, cpu_target, settings.version)
        cfg = TuneConfig(n_trials=8, batch_size=8, n_threads=1, min_repeat_ms=5, seed=0,
                         build_timeout_s=60)  # a loaded CI machine can take > 3 s for one compile
        with session_module.TuningSession(cfg, task.target_json) as session:
            result = session.tune(task, open_database(":memory:"))
        assert result.status_counts[Status.OK] == result.n_new >= 1  # checked against the float64 reference
        best[settings.fast_math] = result.best_latency_s
    assert best[new.fast_math] < best[old.fast_math] / 2, best
