"""The schedules measured with a task's defaults, before any search: the other micro-kernel tiles, another CPU's
best schedule of the same task, and a similar task's best refitted to this one."""

from __future__ import annotations

from autosched._tvm import as_python, save_json
from autosched.db import MemoryDatabase, TaskRow
from autosched.records import Candidate, MeasureResult, Status
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import op_task


def test_a_float32_matmul_s_defaults_include_its_other_micro_kernel_tiles(cpu_target):
    """Which register tile and unroll depth is fastest depends on the shape: the default (the first tile) and the
    ``OTHER_MICROKERNELS`` are measured before any search, so a task the search never reaches gets the fastest."""
    from autosched._tvm import llvm_vector_bits
    from autosched.scheduler.default_candidates import OTHER_MICROKERNELS, default_candidates
    from autosched.spaces.microkernel import DEFAULT_UNROLL, microkernel_params

    task = op_task("dense", (96, 256, 384), cpu_target, settings_for(cpu_target).version)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target), seed=0)
    params = [c.params for c in default_candidates(task, MemoryDatabase(), seed=0)]
    assert params[0] == space.default_schedule()[0] == microkernel_params(space, llvm_vector_bits(cpu_target),
                                                                          unroll=DEFAULT_UNROLL)[0]
    others = [microkernel_params(space, llvm_vector_bits(cpu_target), unroll=unroll)[tile]
              for tile, unroll in OTHER_MICROKERNELS]
    assert params[1:1 + len(others)] == others
    assert len({str(p) for p in params}) == len(params)  # nothing twice


def test_another_cpus_best_schedule_is_measured_with_the_defaults():
    """A task the search never reaches still gets another CPU's best schedule measured here (with its defaults),
    so compile takes it where it is faster; measured once (a second call finds it in the database)."""
    from autosched.db import TaskRow
    from autosched.records import schedule_key
    from autosched.scheduler.default_candidates import default_candidates
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target
    from autosched.tune import to_record

    here, haswell = make_target("llvm", 2), make_target('{"kind": "llvm", "mcpu": "haswell", "num-cores": 1}')
    mine, theirs = (op_task("matmul", (32, 32, 64), t, settings_for(t).version) for t in (here, haswell))
    db = MemoryDatabase()
    n_own = len(default_candidates(mine, db, 0))
    space = TraceSearchSpace(theirs.mod, haswell, settings_for(haswell), seed=3)
    sch = space.apply(space.default_params(len(space.designs) - 1))
    db.commit_task(TaskRow(theirs.key, theirs.name, theirs.target_json, theirs.space_version, "{}", theirs.flops, {}))
    db.commit([to_record(theirs, Candidate(theirs.key, {}, space.effective_decisions(sch),
                                           as_python(sch.trace.as_json(remove_postproc=False))),
                         MeasureResult(Status.OK, [1e-4]))])
    cands = default_candidates(mine, db, 0)
    assert len(cands) == n_own + 1 and schedule_key(cands[-1].decisions) == schedule_key(db.records()[0].decisions)
    db.commit([to_record(mine, cands[-1], MeasureResult(Status.OK, [2e-4]))])
    assert len(default_candidates(mine, db, 0)) == n_own  # measured: not again


def test_a_task_s_defaults_include_the_refitted_best_of_a_similar_task_in_the_database(cpu_target):
    """Another model's dense layer of other sizes, tuned: its best schedule, refitted to this task's sizes, is
    measured with this task's defaults; a task of another operator, or of the same model (its search shares its
    bests), gives nothing."""
    from autosched.scheduler.default_candidates import _stem, transferred_candidates
    from autosched.tune import to_record

    version = settings_for(cpu_target).version
    mine, donor = (op_task("dense", shape, cpu_target, version) for shape in ((64, 128, 256), (96, 256, 384)))
    other_op = op_task("matmul", (32, 32, 32), cpu_target, version)
    assert _stem(mine.name) == _stem(donor.name) != _stem(other_op.name)
    db = MemoryDatabase()
    donor_space = TraceSearchSpace(donor.mod, cpu_target, settings_for(cpu_target))
    params, sch = donor_space.default_schedule()
    for task in (donor, other_op):
        db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, save_json(task.mod),
                               task.flops, task.info))
    cand = Candidate(donor.key, params, donor_space.effective_decisions(sch),
                     as_python(sch.trace.as_json(remove_postproc=False)), save_json(sch.mod))
    db.commit([to_record(donor, cand, MeasureResult(Status.OK, [1e-4]))])
    space = TraceSearchSpace(mine.mod, cpu_target, settings_for(cpu_target))
    (moved,) = transferred_candidates(mine, space, db)
    assert moved.task_key == mine.key and moved.params == space.transfer_params(sch.trace)
    space.apply(moved.params)  # legal at this task's sizes
    assert transferred_candidates(other_op, TraceSearchSpace(other_op.mod, cpu_target, settings_for(cpu_target)),
                                  db) == []
    assert transferred_candidates(mine, space, db, siblings=frozenset({donor.key})) == []  # the same model's task
