"""bench/tuning_curve.py: each point sees what its tuner had measured by then, and MetaSchedule's records apply."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched._tvm import save_json
from autosched.db import TaskRow, open_database
from autosched.measure.base import MeasureResult
from autosched.records import Status
from autosched.tasks import make_target, op_task
from autosched.tune import baseline_record


def test_a_point_keeps_the_records_measured_before_it(load_bench, tmp_path):
    bench = load_bench("tuning_curve")
    target = make_target("llvm", 1)
    task = op_task("matmul", (16, 16, 16), target, 1)
    db = open_database(str(tmp_path / "all.db"))
    db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, save_json(task.mod),
                           task.flops, task.info))
    first = baseline_record(task, MeasureResult(Status.OK, [1e-3]))
    db.commit([dataclasses.replace(first, created_at=100.0), dataclasses.replace(first, created_at=200.0,
                                                                                  latencies_s=[5e-4])])
    db.close()
    early = bench.autosched_until(tmp_path / "all.db", 150.0, tmp_path / "early.db")
    assert [r.created_at for r in early.records()] == [100.0] and early.tasks()[0].task_key == task.key
    late = bench.autosched_until(tmp_path / "all.db", 250.0, tmp_path / "late.db")
    assert len(late.records()) == 2


def test_metaschedule_s_records_are_applied_and_a_point_without_any_is_the_untuned_build(load_bench, mlp_onnx,
                                                                                          tmp_path):
    pytest.importorskip("onnxruntime")
    bench = load_bench("tuning_curve")
    import autosched
    from autosched._tvm import ms
    from autosched.deploy.reference import onnxruntime_session
    from autosched.graph.passes import rewrite

    model, target = autosched.load_model(str(mlp_onnx)), make_target("llvm", 1)
    empty = tmp_path / "empty"
    empty.mkdir()
    compiled, n_tuned = bench.metaschedule_build(model, target, empty)
    assert n_tuned == 0
    snap = tmp_path / "snap"
    snap.mkdir()
    db = ms.database.JSONDatabase(path_workload=str(snap / bench.MS_WORKLOADS),
                                  path_tuning_record=str(snap / bench.MS_RECORDS))
    for task in ms.relax_integration.extract_tasks(rewrite(model.mod, target), target)[:1]:  # one task tuned
        ctx = ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply", rand_state=1)
        sch = ctx.generate_design_space()[0]
        assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(task.mod), run_secs=[1e-3],
                                                         target=target, args_info=ms.arg_info.ArgInfo.from_prim_func(
                                                             task.mod["main"])))
    tuned, n_tuned = bench.metaschedule_build(model, target, snap)
    assert n_tuned == 1
    x = model.random_inputs(0)
    feed = {spec.name: a for spec, a in zip(model.inputs, x, strict=True)}
    want = onnxruntime_session(mlp_onnx.read_bytes(), 1).run(None, feed)
    for build in (compiled, tuned):
        np.testing.assert_allclose(build(*x)[0], want[0], rtol=1e-4, atol=1e-5)
