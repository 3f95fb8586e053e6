"""Records tuned on another CPU of this architecture: replayed on this machine's groups, built for this CPU, timed
here beside the group's default and untuned builds, and taken only where faster (``autosched.scheduler.foreign``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from onnx_graphs import conv_bn_relu
from tuned_records import record_one_schedule_per_task

from autosched.db import MemoryDatabase
from autosched.deploy.build import DEFAULT, compile_model, compile_unscheduled
from autosched.graph.frontends import load_model
from autosched.graph.passes import fusion_groups, group_module, rewrite
from autosched.scheduler import foreign
from autosched.scheduler.foreign import FOREIGN, NO_INTRINSICS, NOT_FASTER, time_here
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.targets import make_target

SKYLAKE = make_target('{"kind": "llvm", "mcpu": "skylake", "num-cores": 1}')  # AVX2: runs on every x86 host here


@pytest.fixture(scope="module")
def model():
    return load_model(conv_bn_relu()[0])


@pytest.fixture(scope="module")
def skylake_db(model):
    db = MemoryDatabase()
    return db, record_one_schedule_per_task(model, SKYLAKE, db)


def _pretend(monkeypatch, foreign_s: float) -> None:
    """Timings as if measured: the other CPU's schedule ``foreign_s``, the group's own builds 1 ms."""
    def fake(variants, target, n_outputs=1):
        return {name: (1e-3 if name in ("untuned", "current") else foreign_s) for name in variants}
    monkeypatch.setattr(foreign, "time_here", fake)


def test_a_faster_schedule_of_another_cpu_is_taken_and_said(model, skylake_db, cpu_target, monkeypatch):
    db, tasks = skylake_db
    _pretend(monkeypatch, 1e-4)
    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) == {FOREIGN} and set(compiled.foreign.values()) == {"skylake x1"}
    untuned = compile_unscheduled(model, cpu_target)
    x = model.random_inputs(0)
    np.testing.assert_allclose(compiled(*x)[0], untuned(*x)[0], rtol=1e-4, atol=1e-5)
    adopted = foreign.Adopted(compiled.foreign, compiled.skipped)
    assert f"{len(compiled.foreign)} fusion group(s) from records tuned on skylake x1" in adopted.summary()


def test_a_slower_one_is_left_and_counted(model, skylake_db, cpu_target, monkeypatch):
    db, tasks = skylake_db
    _pretend(monkeypatch, 1e-2)
    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) == {DEFAULT} and compiled.foreign == {}
    assert compiled.skipped[NOT_FASTER] == len(fusion_groups(rewrite(model.mod, cpu_target)))


def test_tensor_intrinsics_of_a_cpu_this_one_is_not_are_skipped_and_counted(model, cpu_target, monkeypatch):
    no_cpu = make_target('{"kind": "llvm", "mcpu": "x86-64", "mattr": ["+xop", "+avx512fp16"], "num-cores": 1}')
    db = MemoryDatabase()
    record_one_schedule_per_task(model, no_cpu, db)
    for record in db.records():  # as if the schedule had tensorized its inner loop with that CPU's instructions
        trace = record.trace_json
        db.commit([replace(record, record_id=None, latencies_s=[1e-9],
                           trace_json=[[*trace[0], [["Tensorize", [], [], []]]], *trace[1:]])])
    _pretend(monkeypatch, 1e-6)
    compiled = compile_model(model, cpu_target, db)
    assert compiled.foreign == {} and compiled.skipped[NO_INTRINSICS] >= 1


def test_every_variant_is_timed_here_and_a_wrong_one_refused(model, cpu_target):
    from autosched._tvm import IRModule, te

    group = max(fusion_groups(rewrite(model.mod, cpu_target)), key=lambda g: "conv" in g.name)
    mod = group_module(group.func)
    space = TraceSearchSpace(mod, cpu_target, settings_for(cpu_target))
    times = time_here({"untuned": mod, "scheduled": space.apply(space.default_params()).mod}, cpu_target,
                      group.n_outputs)
    assert set(times) == {"untuned", "scheduled"} and all(0 < t < 1.0 for t in times.values())

    def plus(c: float) -> IRModule:
        a = te.placeholder((64,), name="a")
        return IRModule({"main": te.create_prim_func([a, te.compute((64,), lambda i: a[i] + c, name="b")])})

    times = time_here({"untuned": plus(1.0), "wrong": plus(2.0)}, cpu_target)
    assert times["untuned"] > 0 and times["wrong"] is None  # its outputs differ from the untuned build's


@pytest.mark.long
def test_another_cpus_record_that_crashes_or_hangs_here_costs_its_own_timing_not_compile(cpu_target):
    """Other CPUs' schedules are timed in an isolated worker, as candidates are: one that segfaults or hangs
    there is None (after the timeout), the process that compiles goes on, and the next variant is timed."""
    from autosched.testing.faults import faulty_matmul

    times = time_here({"untuned": faulty_matmul(16), "segfault": faulty_matmul(16, "segfault"),
                       "hang": faulty_matmul(16, "hang"), "right": faulty_matmul(16)}, cpu_target, timeout_s=10)
    assert times["segfault"] is None and times["hang"] is None
    assert times["untuned"] > 0 and times["right"] > 0


def test_with_logs_of_several_cpus_the_fastest_here_is_taken(model, cpu_target, monkeypatch):
    db = MemoryDatabase()
    for cpu in ("skylake", "haswell"):
        record_one_schedule_per_task(model, make_target(f'{{"kind": "llvm", "mcpu": "{cpu}", "num-cores": 1}}'), db)
    seen = []

    def fake(variants, target, n_outputs=1):
        seen.append(set(variants))
        return {name: {"haswell x1": 1e-4, "skylake x1": 2e-4}.get(name, 1e-3) for name in variants}
    monkeypatch.setattr(foreign, "time_here", fake)
    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.foreign.values()) == {"haswell x1"}
    assert all({"untuned", "haswell x1", "skylake x1"} <= names for names in seen)  # every CPU's, and its own
