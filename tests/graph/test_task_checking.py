"""Every task of a model is really checked: inputs in range, a finite reference, a finite tolerance, and a task
that cannot be fully checked says so."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_graphs import _model

from autosched.config import TuneConfig
from autosched.graph.frontends import load_model
from autosched.graph.passes import extract_tasks, rewrite
from autosched.measure.worker import _compare
from autosched.session import TuningSession, describe_check
from autosched.spaces.settings import settings_for

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _tasks(proto, target):
    fused = rewrite(load_model(proto, fold_onnx_graph=False).mod, target)
    return extract_tasks(fused, target, settings_for(target).version)


def _one_input_graph(nodes, inits, shape=(4, 16)):
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)


def test_constant_arguments_are_the_models_own_values(cpu_target):
    """A mask filled with float32's lowest value (as Hugging Face builds attention masks) reaches the task as
    it is: scaled random values overflowed to inf and made the tolerance infinite."""
    mask = np.zeros((4, 16), np.float32)
    mask[:, 8:] = np.finfo(np.float32).min
    proto = _one_input_graph([helper.make_node("Add", ["x", "mask"], ["s"]),
                              helper.make_node("Softmax", ["s"], ["y"], axis=-1)], {"mask": mask})
    (task,) = [t for t in _tasks(proto, cpu_target) if t.constants]
    inputs = task.random_inputs(0)
    position, = task.constants
    np.testing.assert_array_equal(inputs[position], mask)
    with TuningSession(TuneConfig(n_threads=1), task.target_json) as session:
        session.prepare_io(task)
    assert task.info["check"] == "full"


def test_inputs_move_into_the_domain_of_sqrt_and_log(cpu_target):
    proto = _one_input_graph([helper.make_node("Sqrt", ["x"], ["r"]), helper.make_node("Log", ["r"], ["y"])], {})
    (task,) = _tasks(proto, cpu_target)
    with TuningSession(TuneConfig(n_threads=1), task.target_json) as session:
        io = session.prepare_io(task)
        saved = np.load(io.io_path)
        assert np.isfinite(saved["out0"]).all()
    assert task.info["check"] == "full (positive inputs)"
    assert saved["in0"].min() > 0


def test_a_task_that_cannot_be_fully_checked_says_so(cpu_target):
    proto = _one_input_graph([helper.make_node("Div", ["x", "zero"], ["y"])], {"zero": np.zeros((4, 16), np.float32)})
    (task,) = _tasks(proto, cpu_target)
    with TuningSession(TuneConfig(n_threads=1), task.target_json) as session:
        session.prepare_io(task)
    assert task.info["check"] == "none: every reference output is inf or nan"


def test_describe_check_counts_non_finite_outputs():
    assert describe_check([np.ones(4), np.arange(3)], "normal") == "full"
    assert describe_check([np.array([1.0, np.inf, np.nan, 2.0])], "normal") == \
        "partial: 2 of 4 reference outputs are inf or nan"


def test_the_tolerance_stays_finite_when_the_reference_has_inf():
    want = np.array([1.0, 2.0, np.inf, -np.inf, np.nan], np.float32)
    assert _compare(want.copy(), want, 1e-3, 1e-4) is None  # same inf/nan positions, same values
    wrong = want.copy()
    wrong[1] = 2.5  # the inf elsewhere must not widen the tolerance to infinity
    assert _compare(wrong, want, 1e-3, 1e-4).startswith("max|err|=0.5")
    flipped = want.copy()
    flipped[2] = 7.0
    assert _compare(flipped, want, 1e-3, 1e-4) is not None


@pytest.mark.slow
def test_tune_names_the_tasks_it_could_not_fully_check(tmp_path, capsys):
    from autosched.cli import main

    proto = _one_input_graph([helper.make_node("Div", ["x", "zero"], ["y"])], {"zero": np.zeros((4, 16), np.float32)})
    path = tmp_path / "div0.onnx"
    onnx.save(proto, str(path))
    assert main(["tune", str(path), "--trials", "2", "--threads", "1", "--db", str(tmp_path / "t.db")]) == 0
    err = capsys.readouterr().err
    assert "1 of 1 tasks could not be fully checked" in err and "every reference output is inf or nan" in err


class _TimingOutBuilder:
    """Every build runs past the builders' timeout (as a big erf expansion did on a loaded machine)."""

    def build(self, candidates, timeout_s=None):
        from autosched.measure.base import BuildResult
        from autosched.records import Status

        return [BuildResult(c, None, "build timed out after 3 s", Status.TIMEOUT) for c in candidates]

    def close(self):
        pass


def test_a_reference_build_past_the_timeout_is_built_once_more_without_it(cpu_target):
    from autosched.tasks import primfunc_task
    from autosched.workloads import get_workload

    task = primfunc_task("softmax", get_workload("softmax").prim_func((8, 64)), cpu_target,
                         settings_for(cpu_target).version)
    with TuningSession(TuneConfig(n_threads=1), task.target_json, builder=_TimingOutBuilder()) as session:
        io = session.prepare_io(task)
        out = np.load(io.io_path)["out0"]
    assert task.info["check"] == "full"
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-5)  # the softmax really ran


def test_a_task_without_a_reference_is_left_out_and_the_model_goes_on(cpu_target, monkeypatch):
    from autosched.db import MemoryDatabase
    from autosched.errors import ReferenceBuildError
    from autosched.scheduler.model_tuning import tune_model_tasks

    proto = _one_input_graph([helper.make_node("Sqrt", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["s"]),
                              helper.make_node("MatMul", ["s", "w"], ["y"])], {"w": np.eye(16, dtype=np.float32)})
    tasks = _tasks(proto, cpu_target)
    assert len(tasks) >= 2
    broken = tasks[0].key
    with TuningSession(TuneConfig(n_threads=1, n_trials=1), tasks[0].target_json) as session:
        real = session.prepare_io

        def prepare_io(task):
            if task.key == broken:
                raise ReferenceBuildError(f"the unscheduled {task.name} does not build")
            return real(task)

        monkeypatch.setattr(session, "prepare_io", prepare_io)
        result = tune_model_tasks(session, tasks, MemoryDatabase(), 1)
    assert [t.key for t in result.unmeasured] == [broken]
    assert len(result.states) == len(tasks) - 1
