"""Inference from the database: tuned groups found again by key, default schedules elsewhere, exported
libraries load and run, outputs match ONNX Runtime."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from onnx_graphs import conv_bn_relu, mlp, redundant
from tuned_records import record_one_schedule_per_task

from autosched.db import MemoryDatabase, TaskRow
from autosched.deploy.build import (
    DEFAULT,
    NO_REPLAY,
    OTHER_TARGET,
    OTHER_TVM,
    TUNED,
    _best_schedule_record,
    compile_model,
    compile_unscheduled,
    same_groups,
)
from autosched.deploy.library import load_compiled
from autosched.deploy.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.graph.frontends import load_model
from autosched.graph.passes import extract_tasks, rewrite
from autosched.records import MeasureResult, Status
from autosched.spaces.settings import settings_for

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]


def _relax_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tune_relax", ROOT / "examples" / "relax_module" / "tune_relax.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return load_model(module.build_module(batch=2)[0])


def _zoo_onnx(name):
    from autosched.api import load_model as api_load

    return api_load(f"zoo:{name}")


def _zoo_torch(name):
    from autosched.corpus import zoo

    module, inputs = zoo.build(name)
    return load_model(module, example_inputs=inputs)


# Every model used in tests and examples (the zoo models as ONNX files, the way the examples and the
# benchmark import them, and through torch.export where an example does that).
MODELS = {
    "conv_bn_relu": lambda: load_model(conv_bn_relu()[0]),
    "mlp": lambda: load_model(mlp(), {"x": (3, 16)}),
    "redundant": lambda: load_model(redundant()[0]),
    "relax_mlp_example": _relax_example,
    **{f"zoo_{n}_onnx": (lambda n=n: _zoo_onnx(n)) for n in ("tiny_cnn", "tiny_mlp", "mlp", "resnet18", "bert")},
    **{f"zoo_{n}_torch": (lambda n=n: _zoo_torch(n)) for n in ("tiny_cnn", "tiny_mlp", "bert")},
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_task_extracted_for_tuning_is_found_again_when_compiling(name, cpu_target):
    if name.startswith("zoo_"):
        pytest.importorskip("torch")
    model = MODELS[name]()
    db = MemoryDatabase()
    tasks = record_one_schedule_per_task(model, cpu_target, db)
    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) == {TUNED}, compiled.sources
    assert len(compiled.sources) >= len(tasks)
    inputs = model.random_inputs(0)
    if model.onnx_bytes is not None:
        want = run_onnxruntime(onnxruntime_session(model, 1), model, inputs)
    else:
        want = compile_unscheduled(model, cpu_target)(*inputs)
    assert max_relative_error(compiled(*inputs), want) < 1e-4


def test_without_records_groups_get_default_schedules_and_match_the_untuned_build(cpu_target, tmp_path):
    model = load_model(conv_bn_relu()[0])
    compiled = compile_model(model, cpu_target, MemoryDatabase())
    assert set(compiled.sources.values()) == {DEFAULT}
    inputs = model.random_inputs(3)
    np.testing.assert_allclose(compiled(*inputs)[0], compile_unscheduled(model, cpu_target)(*inputs)[0],
                               rtol=1e-4, atol=1e-5)
    path = compiled.export_library(tmp_path / "lib" / "model.so")
    loaded = load_compiled(path)
    assert loaded.inputs == model.inputs and loaded.sources == compiled.sources
    np.testing.assert_array_equal(loaded(*inputs)[0], compiled(*inputs)[0])
    assert len(loaded.time(inputs, n_threads=1, repeat=2, min_repeat_ms=1)) == 2
    kernel_time = loaded.kernel_timer(inputs)
    assert all(0 < kernel_time() < 1.0 for _ in range(2))


def test_records_for_another_cpu_are_applied_only_where_they_measure_faster_here(cpu_target):
    from autosched.scheduler.foreign import FOREIGN, NOT_FASTER
    from autosched.tasks import make_target

    model = load_model(conv_bn_relu()[0])
    db = MemoryDatabase()
    tasks = record_one_schedule_per_task(model, make_target('{"kind": "llvm", "mcpu": "skylake", "num-cores": 1}'),
                                         db)
    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) <= {DEFAULT, FOREIGN} and compiled.borrowed == {}
    assert set(compiled.foreign.values()) <= {"skylake x1"}
    # each task: its record was timed here against the default and untuned builds, then taken or counted
    assert len(compiled.foreign) + compiled.skipped.get(NOT_FASTER, 0) == len(tasks)
    assert compiled.skipped[OTHER_TARGET] == len(db.records())


def test_records_of_another_tvm_release_are_skipped_and_counted(cpu_target):
    """A record measured with another TVM release (an imported export, say) is never applied, even when it is
    the fastest; the group takes this release's best record instead, and the skipped ones are counted."""
    from dataclasses import replace

    model = load_model(conv_bn_relu()[0])
    db = MemoryDatabase()
    tasks = record_one_schedule_per_task(model, cpu_target, db)
    mine = {t.key: db.best(t.key).record_id for t in tasks}
    forged = [replace(db.best(t.key), record_id=None, latencies_s=[1e-12], tvm_version="0.19.0") for t in tasks]
    db.commit(forged)
    assert all(db.best(t.key).tvm_version == "0.19.0" for t in tasks)  # the forged ones are the fastest
    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) == {TUNED} and compiled.skipped == {OTHER_TVM: len(tasks)}
    for t in tasks:  # the record applied is this release's best
        assert _best_schedule_record(db, t.key, t.target_json, Counter()).record_id == mine[t.key]


def test_a_record_whose_trace_no_longer_replays_gives_a_default_schedule_and_is_counted(cpu_target):
    from dataclasses import replace

    model = load_model(conv_bn_relu()[0])
    db = MemoryDatabase()
    tasks = record_one_schedule_per_task(model, cpu_target, db)
    broken = []
    for t in tasks:  # the fastest record names a block the group does not have (a renamed one, say)
        best = db.best(t.key)
        trace = [[list(inst) for inst in best.trace_json[0]], best.trace_json[1]]
        first = next(inst for inst in trace[0] if inst[0] == "GetSBlock")
        first[2] = ["no_such_block", first[2][1]]
        broken.append(replace(best, record_id=None, latencies_s=[1e-12], trace_json=trace))
    db.commit(broken)
    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) == {DEFAULT} and compiled.skipped == {NO_REPLAY: len(tasks)}
    x = np.random.default_rng(0).standard_normal(model.inputs[0].shape).astype("float32")
    assert max_relative_error(compiled(x), compile_unscheduled(model, cpu_target)(x)) < 1e-4


def test_records_tuned_at_another_thread_count_are_used_from_the_nearest_one(cpu_target):
    from autosched.tasks import make_target

    model = load_model(conv_bn_relu()[0])
    db = MemoryDatabase()
    for n_threads in (1, 8):
        record_one_schedule_per_task(model, make_target("llvm", n_threads), db)
    compiled = compile_model(model, make_target("llvm", 3), db)
    assert set(compiled.sources.values()) == {TUNED}
    assert set(compiled.borrowed.values()) == {1} and set(compiled.borrowed) == set(compiled.sources)
    at_one = compile_model(model, make_target("llvm", 1), db)
    assert at_one.borrowed == {}  # the exact thread count's records are used as they are
    inputs = model.random_inputs(0)
    np.testing.assert_allclose(compiled(*inputs)[0], compile_unscheduled(model, cpu_target)(*inputs)[0],
                               rtol=1e-4, atol=1e-5)


def test_compiled_model_refuses_wrong_inputs(cpu_target):
    from autosched.errors import UserInputError

    compiled = compile_unscheduled(load_model(conv_bn_relu()[0]), cpu_target)
    with pytest.raises(UserInputError, match="must have shape"):
        compiled(np.zeros((1, 3, 5, 5), "float32"))
    with pytest.raises(UserInputError, match="takes 1 inputs"):
        compiled()


def test_a_budget_that_ended_after_the_baselines_still_gets_default_schedules(cpu_target):
    """Only the untuned baselines in the database (a short time budget): the groups get their default schedule,
    not the unscheduled build the baseline record stands for (5-10x slower). Once a schedule was measured and
    the baseline still won, the baseline is applied."""
    from autosched.tune import baseline_record

    model = load_model(conv_bn_relu()[0])
    db = MemoryDatabase()
    tasks = extract_tasks(rewrite(model.mod, cpu_target), cpu_target, settings_for(cpu_target).version)
    for task in tasks:
        db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, "", task.flops, {}))
        db.commit([baseline_record(task, MeasureResult(Status.OK, [1e-6]))])
    assert set(compile_model(model, cpu_target, db).sources.values()) == {DEFAULT}
    record_one_schedule_per_task(model, cpu_target, db)  # measured at 1e-3 s: slower than the 1e-6 s baselines
    assert set(compile_model(model, cpu_target, db).sources.values()) == {TUNED}  # the baseline record


def _at_offset(x: np.ndarray, shift: int) -> np.ndarray:
    """A copy of ``x`` whose data starts ``shift`` elements after a 64-byte boundary."""
    from autosched.deploy.serving import ALIGNMENT

    buf = np.empty(x.size + ALIGNMENT, x.dtype)
    start = (-buf.ctypes.data % ALIGNMENT) // x.itemsize + shift
    view = buf[start:start + x.size].reshape(x.shape)
    view[...] = x
    return view


def test_the_serving_call_takes_aligned_inputs_without_a_copy_and_writes_into_given_outputs(cpu_target):
    model = load_model(conv_bn_relu()[0])
    compiled = compile_model(model, cpu_target, MemoryDatabase())
    x = model.random_inputs(1)[0]
    want = compiled(x)[0].copy()
    aligned, unaligned = (_at_offset(x, shift) for shift in (0, 1))
    caller = compiled._caller()
    assert np.shares_memory(np.from_dlpack(caller._argument(0, aligned)), aligned)  # no copy
    assert not np.shares_memory(np.from_dlpack(caller._argument(0, unaligned)), unaligned)  # copied, staged
    for arg in (aligned, unaligned, x.astype("float64"), x.tolist()):
        np.testing.assert_array_equal(compiled(np.asarray(arg) if isinstance(arg, list) else arg)[0], want)
    first = compiled(x)[0]
    second = compiled(x + 1)[0]
    assert not np.shares_memory(first, second)  # results of earlier calls are never overwritten
    np.testing.assert_array_equal(first, want)
    out = np.empty_like(want)
    assert compiled(x, out=[out])[0] is out
    np.testing.assert_array_equal(out, want)


def test_the_serving_call_takes_and_returns_torch_tensors(cpu_target):
    torch = pytest.importorskip("torch")
    model = load_model(conv_bn_relu()[0])
    compiled = compile_model(model, cpu_target, MemoryDatabase())
    x = model.random_inputs(2)[0]
    got = compiled(torch.from_numpy(x))[0]
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got.numpy(), compiled(x)[0])
    out = torch.empty(tuple(got.shape))
    compiled(torch.from_numpy(x), out=[out])
    np.testing.assert_array_equal(out.numpy(), got.numpy())


def test_the_serving_call_refuses_a_wrong_out(cpu_target):
    from autosched.errors import UserInputError

    model = load_model(conv_bn_relu()[0])
    compiled = compile_model(model, cpu_target, MemoryDatabase())
    x = model.random_inputs(0)[0]
    with pytest.raises(UserInputError, match="out= must hold 1 arrays"):
        compiled(x, out=[])
    with pytest.raises(UserInputError, match=r"out\[0\] must have shape"):
        compiled(x, out=[np.empty((1,), "float32")])


def test_groups_pair_with_the_same_groups_of_the_model_at_other_sizes():
    """Group names carry numbers that differ between sizes (``matmul1`` at seq=4 is ``matmul2`` at seq=8): the
    k-th group named the same but for its numbers pairs with the k-th there."""
    from types import SimpleNamespace

    from autosched._tvm import te

    x = te.placeholder((4,), name="x")
    func = te.create_prim_func([x, te.compute((4,), lambda i: x[i] + 1.0)])
    here = [SimpleNamespace(name=n, func=func) for n in ("matmul1", "softmax1", "matmul21", "fused_add3_relu")]
    there = [SimpleNamespace(name=n, func=func.with_attr("tag", n))
             for n in ("matmul2", "softmax1", "matmul11", "take1")]
    paired = same_groups(here, there)
    assert sorted(paired) == ["matmul1", "matmul21", "softmax1"]  # fused_add3_relu has no counterpart there
    assert [str(paired[n]["main"].attrs["tag"]) for n in ("matmul1", "matmul21", "softmax1")] == [
        "matmul2", "matmul11", "softmax1"]


def test_a_compiled_model_called_from_eight_threads_at_once_gives_each_its_own_right_outputs(cpu_target):
    """The VM and the staging tensors are shared: calls take turns (a lock per model), and each thread's outputs
    are its own inputs' (unlocked, this test crashed its process: a segfault inside the VM)."""
    import threading

    model = load_model(mlp(batch=64, d_in=256, hidden=256))
    compiled = compile_model(model, cpu_target, MemoryDatabase())
    inputs = [model.random_inputs(seed) for seed in range(8)]
    want = [compiled(*x)[0].copy() for x in inputs]
    # non-contiguous inputs: each call copies into the shared staging tensor, the race the lock closes
    strided = [[np.asfortranarray(a) if a.ndim > 1 else a for a in x] for x in inputs]
    barrier, wrong, errors = threading.Barrier(8), [], []

    def calls(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(50):
                got = compiled(*strided[i])[0]
                if not np.array_equal(got, want[i]):
                    wrong.append(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not wrong, (errors[:1], sorted(set(wrong)))
