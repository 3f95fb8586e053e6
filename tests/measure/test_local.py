"""Real builder and runner: a crashing, a hanging, a wrong and an unbuildable candidate each cost one trial."""

from __future__ import annotations

import pytest

from autosched._tvm import IRModule, save_json, te, tirx, tvm
from autosched.config import TuneConfig
from autosched.db import MemoryDatabase
from autosched.records import Candidate, Status
from autosched.session import TuningSession
from autosched.testing.fakes import ListStrategy
from autosched.tune import tune_task

pytestmark = pytest.mark.slow


def _matmul_variant(n: int, extra=None) -> IRModule:
    """The task's matmul signature, with ``extra(i, j)`` added to every output element."""
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    out = c if extra is None else te.compute((n, n), lambda i, j: c[i, j] + extra(i, j), name="D")
    return IRModule({"main": te.create_prim_func([a, b, out])})


def _extern(name, *args):
    return lambda i, j: tirx.Cast("float32", tirx.call_extern("int32", name, *args))


def test_a_build_can_be_given_another_timeout(matmul_task):
    cand = Candidate(matmul_task.key, {}, decisions=[], mod_json=save_json(_matmul_variant(32)))
    with TuningSession(TuneConfig(n_threads=1, build_timeout_s=60), matmul_task.target_json) as session:
        (hurried,) = session.builder.build([cand], timeout_s=0.001)
        (patient,) = session.builder.build([cand])
    assert hurried.status is Status.TIMEOUT and "after 0.001 s" in hurried.error
    assert patient.error is None and patient.artifact_path


def test_bad_candidates_cost_one_trial_each_and_the_run_finishes(matmul_task):
    n = 32
    mods = {
        "good": _matmul_variant(n),
        "crash": _matmul_variant(n, _extern("abort")),
        "hang": _matmul_variant(n, _extern("sleep", 1000)),
        "wrong": _matmul_variant(n, lambda i, j: tirx.const(1.0, "float32")),
    }
    order = ["good", "crash", "hang", "wrong", "unbuildable", "good"]
    cands = [Candidate(matmul_task.key, {"kind": name}, decisions=[i],
                       mod_json=save_json(mods[name]) if name in mods else "{not a module")
             for i, name in enumerate(order)]
    cfg = TuneConfig(n_threads=1, run_timeout_s=4, build_timeout_s=60, repeat=1, min_repeat_ms=1)
    db = MemoryDatabase()
    with TuningSession(cfg, matmul_task.target_json) as session:
        strategy = ListStrategy(cands)
        result = tune_task(matmul_task, strategy, session.builder, session.runner, db,
                           session.prepare_io(matmul_task), n_trials=len(cands), batch_size=3)
    statuses = [r.status for r in db.records()]
    assert statuses == [Status.OK, Status.RUN_ERROR, Status.TIMEOUT, Status.WRONG_RESULT, Status.BUILD_ERROR,
                        Status.OK]
    assert result.n_new == 6 and len(strategy.told) == 6
    errors = [r.error for r in db.records()]
    assert "differs" in errors[3] and "timed out" in errors[2]
    assert result.best.status is Status.OK and result.best.params == {"kind": "good"}


def test_weight_layout_rewrite_is_checked_but_not_timed(cpu_target):
    """A schedule that re-lays out a constant weight inside the kernel is split as a model's build splits it:
    the weight laid out by ``main_weight_prepack``, then ``main_timed`` (reading it in the new layout) checked
    against the reference and timed. The library holds one copy of the kernel, not a second one with the rewrite."""
    import json
    import os

    from autosched._tvm import as_python
    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import op_task, primfunc_task

    dense = op_task("dense", (16, 64, 64), cpu_target, settings_for(cpu_target).version).mod["main"]
    weight_is_constant = IRModule({"main": dense.with_attr("layout_free_buffers", [1])})  # as in a model graph
    task = primfunc_task("dense_const_weight", weight_is_constant, cpu_target, settings_for(cpu_target).version)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target), seed=0)
    sch = next(s for s in (space.apply(space.default_params(d)) for d in range(len(space.designs)))
               if "layout_rewrite_preproc" in s.mod.script())
    cand = Candidate(task.key, {}, [0], as_python(sch.trace.as_json()), mod_json=save_json(sch.mod))
    cfg = TuneConfig(n_threads=1, repeat=2, min_repeat_ms=1)
    with TuningSession(cfg, task.target_json) as session:
        (build,) = session.builder.build([cand])
        with open(build.artifact_path + ".timed.json") as f:
            spec = json.load(f)
        shapes = [tuple(s) for s, _ in spec["shapes"]]
        assert shapes[1] != (64, 64) and shapes[0] == (16, 64)  # the weight arrives in the schedule's layout
        assert spec["prepacked"] == [1]
        lib = tvm.runtime.load_module(build.artifact_path)
        assert [lib.implements_function(f) for f in ("main", "main_timed", "main_weight_prepack")] == [
            False, True, True]
        (res,) = session.runner.run([build], session.prepare_io(task))
    assert res.status is Status.OK and len(res.latencies_s) == 2
    assert not os.path.exists(build.artifact_path + ".timed.json")  # cleaned up with the library


def test_cutoff_judges_a_warm_run_not_the_cold_checking_run(matmul_task):
    """A candidate as fast as the best gets its full repeats even though its first (cold) run is slow;
    only one still slower than ``cutoff_ratio`` x the best when warm is cut to a single timing."""
    cand = Candidate(matmul_task.key, {}, [0], mod_json=save_json(matmul_task.mod))
    cfg = TuneConfig(n_threads=1, repeat=3, min_repeat_ms=1)
    with TuningSession(cfg, matmul_task.target_json) as session:
        io, runner = session.prepare_io(matmul_task), session.runner
        (first,) = runner.run(session.builder.build([cand]), io)
        assert len(first.latencies_s) == 3
        n_full = sum(len(r.latencies_s) == 3 for _ in range(5)
                     for r in runner.run(session.builder.build([cand]), io))
        runner._best_s[io.io_path] = first.latency_s / 100  # now the same kernel is far behind the best
        (slow,) = runner.run(session.builder.build([cand]), io)
    assert n_full >= 4  # the same kernel again: timed in full (allowing one noisy warm run)
    assert slow.status is Status.OK and len(slow.latencies_s) == 1


def test_an_untuned_baseline_slower_than_its_cutoff_is_timed_once_and_only_it(matmul_task):
    """``time_once_above``: the next candidate of the task only (the untuned baseline, whose latency ranks the task
    and bounds its schedules) is timed by one warm run when its checking run takes longer."""
    cand = Candidate(matmul_task.key, {}, [0], mod_json=save_json(matmul_task.mod))
    cfg = TuneConfig(n_threads=1, repeat=3, min_repeat_ms=1)
    with TuningSession(cfg, matmul_task.target_json) as session:
        io, runner = session.prepare_io(matmul_task), session.runner
        runner.time_once_above(io, 1e-9)  # every run is slower than that
        (once,) = runner.run(session.builder.build([cand]), io)
        (after,) = runner.run(session.builder.build([cand]), io)
        runner.time_once_above(io, 60.0)  # no run is slower than that: timed in full
        (fast,) = runner.run(session.builder.build([cand]), io)
    assert once.status is Status.OK and len(once.latencies_s) == 1
    assert len(after.latencies_s) == 3 and len(fast.latencies_s) == 3


def test_workers_load_tvm_but_not_pytorch_and_a_restarted_worker_neither():
    import os

    from autosched.measure.local import _Pool

    def torch_blocked_tvm_loaded() -> tuple[bool, bool]:  # local: sent to the worker by value
        import sys

        return "torch" in sys.modules and sys.modules["torch"] is None, "tvm" in sys.modules

    pool = _Pool(1, 30.0)
    try:
        assert pool.submit(torch_blocked_tvm_loaded).result() == (True, True)
        with pytest.raises(ChildProcessError):  # the worker dies; the next call starts a new one
            pool.submit(os._exit, 1).result()
        assert pool.submit(torch_blocked_tvm_loaded).result() == (True, True)
    finally:
        pool.close()



class _RecordingLibrary:
    """A real built library whose ``time_evaluator`` calls are recorded."""

    def __init__(self, lib):
        self.lib, self.timer_kwargs = lib, []

    def __getitem__(self, name):
        return self.lib[name]

    def time_evaluator(self, name, dev, **kwargs):
        self.timer_kwargs.append(kwargs)
        return self.lib.time_evaluator(name, dev, **kwargs)


def test_the_flush_condition_times_one_cold_run_per_repeat():
    """Flushed, each repeat is one run after TVM's cache flush, not a loop of min_repeat_ms warm runs."""
    import numpy as np

    from autosched._tvm import tvm
    from autosched.measure.worker import measure

    a, b = (np.random.default_rng(i).random((32, 32), dtype=np.float32) for i in range(2))
    io = {"in0": a, "in1": b, "out0": a @ b, "shape_out0": np.array((32, 32)), "dtype_out0": np.array("float32")}
    for condition, (min_repeat_ms, preproc) in {"warm": (200, ""), "flush": (0, "cache_flush_cpu_non_first_arg")
                                                }.items():
        lib = _RecordingLibrary(tvm.compile(_matmul_variant(32), target="llvm").mod)
        res = measure(lib, tvm.cpu(), io, 1, None, repeat=3, min_repeat_ms=200, rtol=1e-4, atol=1e-5,
                      condition=condition)
        assert res["status"] == "OK" and len(res["latencies_s"]) == 3
        (kwargs,) = lib.timer_kwargs
        assert (kwargs["number"], kwargs["min_repeat_ms"], kwargs["f_preproc"]) == (1, min_repeat_ms, preproc)


def test_the_rotate_condition_runs_each_time_on_new_copies_of_all_but_the_first_argument(monkeypatch):
    """Rotated, the copies of the weights and outputs pass through twice the last-level cache (here, a 1 MiB cache
    pretended: 16 copies of a 128x128 matmul's 64 KiB weight and 64 KiB output), the first argument is the same
    tensor in every run, every run's output is right, and each repeat is at least one pass over the copies."""
    import numpy as np

    from autosched import bandwidth
    from autosched._tvm import tvm
    from autosched.measure import worker

    monkeypatch.setattr(bandwidth, "last_level_cache_bytes", lambda: 1 << 20)
    a, b = (np.random.default_rng(i).random((128, 128), dtype=np.float32) for i in range(2))
    io = {"in0": a, "in1": b, "out0": a @ b, "shape_out0": np.array((128, 128)), "dtype_out0": np.array("float32")}
    lib = tvm.compile(_matmul_variant(128), target="llvm").mod
    seen = []

    def spy(*args):
        seen.append(args)
        return lib["main"](*args)

    times = worker.rotated_times(spy, tvm.cpu(), [tvm.runtime.tensor(x) for x in (a, b)] +
                                 [tvm.runtime.empty((128, 128), "float32")], 2, repeat=2, min_repeat_ms=0)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert len(seen) == 16 * 3  # touched once, then one pass per repeat (min_repeat_ms 0)
    copies = seen[:16]
    assert len({id(c[0]) for c in seen}) == 1  # the activation stays one tensor
    assert len({id(c[1]) for c in copies}) == 16 and len({id(c[2]) for c in copies}) == 16
    for c in copies:
        np.testing.assert_allclose(c[2].numpy(), a @ b, rtol=1e-4)
    res = worker.measure(lib, tvm.cpu(), io, 1, None, repeat=3, min_repeat_ms=1, rtol=1e-4, atol=1e-5,
                         condition="rotate")
    assert res["status"] == "OK" and len(res["latencies_s"]) == 3
