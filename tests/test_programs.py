"""Any tensor program: TE computes, TIR PrimFuncs and Relax modules as tasks; unsupported constructs refused."""

from __future__ import annotations

import numpy as np
import pytest

import autosched
from autosched._tvm import IRModule, cpu_device, te, tirx, tvm
from autosched.config import TuneConfig
from autosched.corpus.modules import relax_linear
from autosched.errors import UserInputError
from autosched.programs import compile_program, load_program, program_task
from autosched.tasks import make_target

TINY = TuneConfig(n_trials=4, batch_size=4, n_threads=1, min_repeat_ms=1, seed=0)


def te_matmul(n: int = 16, relu: bool = True) -> list:
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    out = te.compute((n, n), lambda i, j: te.max(c[i, j], tirx.const(0, "float32")), name="D") if relu else c
    return [a, b, out]


SCALE_SOURCE = '''
from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def scale(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        with T.sblock("B"):
            vi = T.axis.spatial(64, i)
            B[vi] = A[vi] * T.float32(2)
'''


@pytest.fixture()
def program_file(tmp_path):
    """Write Python source to a file; returns its path."""

    def write(source: str, name: str = "programs.py"):
        path = tmp_path / name
        path.write_text(source)
        return path

    return write


@pytest.fixture(scope="module")
def target():
    return make_target("llvm", 1)


# --- programs become tasks ---------------------------------------------------------------------------------
def test_te_primfunc_and_module_give_one_task_key_whatever_the_names(target):
    func = te.create_prim_func(te_matmul())
    keys = {program_task(p, target).key for p in (te_matmul(), func, func.with_attr("global_symbol", "mine"),
                                                  IRModule({"other": func}))}
    assert len(keys) == 1
    task = program_task(te_matmul(), target, name="mm")
    assert task.name == "mm" and task.n_outputs == 1 and task.reference is None and task.flops > 0
    assert task.mod["main"].attrs["global_symbol"] == "main"


def test_outputs_alone_get_their_inputs_in_front(target):
    a, b, d = te_matmul()
    task = program_task(d, target)
    assert task.name == "D" and [s for s, _ in task.arg_specs()] == [(16, 16)] * 3
    assert task.key == program_task([a, b, d], target).key


def test_several_outputs_are_counted(target):
    x = te.placeholder((8,), name="x")
    y = te.compute((8,), lambda i: x[i] * 2, name="y")
    z = te.compute((8,), lambda i: y[i] + 1, name="z")
    assert program_task([x, y, z], target).n_outputs == 2


def test_a_tvmscript_primfunc_is_a_task(program_file, target):
    func, name = load_program(f"{program_file(SCALE_SOURCE)}:scale")
    task = program_task(func, target, name)
    assert task.name == "scale" and task.arg_specs() == [((64,), "float32"), ((64,), "float32")]


def test_the_te_workloads_of_the_ansor_and_metaschedule_papers_are_tasks(target):
    from tvm.s_tir.meta_schedule.testing.te_workload import create_te_workload

    for name in ("C1D", "C2D", "C3D", "GMM", "GRP", "DIL", "DEP", "T2D", "CAP", "NRM", "SFM", "CBR"):
        task = program_task(create_te_workload(name, 0), target, name)
        assert task.n_outputs == 1 and task.flops > 0, name


# --- unsupported constructs: one line naming them ------------------------------------------------------------
def _dynamic():
    n = te.var("n")
    a = te.placeholder((n, 8), name="A")
    return [a, te.compute((n, 8), lambda i, j: a[i, j] * 2, name="B")]


def _extern():
    x = te.placeholder((8,), name="X")
    return [x, te.extern((8,), [x], lambda ins, outs: tirx.call_packed("my_func", ins[0], outs[0]), name="Y")]


def _plain_loops():
    from tvm.script import tirx as T

    @T.prim_func
    def plain(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (8,), "float32")
        B = T.match_buffer(b, (8,), "float32")
        for i in range(8):
            B[i] = A[i] * T.float32(2)

    return plain


def _scalar_param():
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def scaled(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), s: T.float32):
        for i in range(8):
            with T.sblock("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] * s

    return scaled


def _two_primfuncs():
    func = te.create_prim_func(te_matmul())
    return IRModule({"a": func, "b": func})


def _outputs_first():
    a, b, d = te_matmul()
    return [d, a, b]


UNSUPPORTED = {
    "not a program": (lambda: 42, "cannot tune an object of type int"),
    "list of non-tensors": (lambda: [te_matmul()[0], "x"], "a list must hold TE tensors only"),
    "dynamic shape": (_dynamic, "dynamic shape: argument A has symbolic dimension(s) n"),
    "extern call": (_extern, "opaque call tirx.tvm_call_packed('my_func')"),
    "no blocks": (_plain_loops, "no schedulable blocks"),
    "scalar parameter": (_scalar_param, "scalar parameter s (float32)"),
    "two PrimFuncs": (_two_primfuncs, "IRModule holds 2 PrimFuncs (a, b)"),
    "empty module": (lambda: IRModule({}), "IRModule holds 0 PrimFuncs"),
    "outputs first": (_outputs_first, "output D comes before input A"),
    "missing input": (lambda: te_matmul()[::2], "input B is used but not in the list"),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_constructs_are_one_line_errors_naming_them(case, target, tmp_path):
    build, message = UNSUPPORTED[case]
    with pytest.raises(UserInputError) as info:
        autosched.tune(build(), target, db=str(tmp_path / "t.db"), config=TINY)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1
    assert not (tmp_path / "t.db").exists()  # refused before the database is created


def test_compiling_an_untuned_program_from_a_database_says_so(target, tmp_path):
    from autosched.db import open_database

    path = tmp_path / "empty.db"
    open_database(str(path)).close()
    with pytest.raises(UserInputError, match="is not in the database: tune it first"):
        compile_program(te_matmul(), str(path), target)


# --- programs in files (--func path.py:name) -----------------------------------------------------------------
FILE_CASES = [
    ("nothing", "PATH.py:NAME"),
    ("{path}", "PATH.py:NAME"),
    ("{dir}/missing.py:f", "is not a file"),
    ("{path}:nope", "has no attribute 'nope'; programs found there: scale"),
    ("{path}:needs_args", "calling needs_args() failed"),
    ("{path}:fails", "fails() raised ZeroDivisionError"),
    ("{broken}:x", "raised NameError"),
]


@pytest.mark.parametrize("spec,message", FILE_CASES)
def test_bad_program_files_are_one_line_errors(spec, message, program_file, tmp_path):
    path = program_file(SCALE_SOURCE + "\n\ndef needs_args(n):\n    return n\n\n\ndef fails():\n    return 1 / 0\n")
    broken = program_file("undefined_name + 1\n", "broken.py")
    with pytest.raises(UserInputError) as info:
        load_program(spec.format(path=path, dir=tmp_path, broken=broken))
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1


def test_a_function_without_arguments_returning_a_program_is_called(program_file):
    path = program_file("from tvm import te\n\ndef make():\n    a = te.placeholder((4,), name='a')\n"
                        "    return [a, te.compute((4,), lambda i: a[i] + 1, name='b')]\n")
    program, name = load_program(f"{path}:make")
    assert name == "make" and len(program) == 2


def test_tune_is_the_function_and_the_tune_module_still_imports():
    import importlib

    from autosched.tune import TuneResult

    assert callable(autosched.tune) and autosched.tune is autosched.programs.tune
    assert importlib.import_module("autosched.tune").TuneResult is TuneResult


# --- real tuning on tiny budgets -------------------------------------------------------------------------------
def _run(kernel, program, inputs):
    dev = cpu_device()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.empty(tuple(int(d) for d in program[-1].shape), "float32", dev)
    kernel["main"](*args, out)
    return out.numpy()


@pytest.mark.slow
def test_tune_a_te_compute_then_reload_and_compile_it(target, tmp_path):
    db = str(tmp_path / "te.db")
    result = autosched.tune(te_matmul(), target, db=db, config=TINY, name="mm_relu")
    assert result.n_new == 4 and result.best is not None and result.task.name == "mm_relu"
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((16, 16)).astype("float32") for _ in range(2)]
    untuned = _run(compile_program(te_matmul(), None, target), te_matmul(), inputs)
    np.testing.assert_allclose(untuned, np.maximum(inputs[0] @ inputs[1], 0), rtol=1e-4, atol=1e-5)
    for kernel in (compile_program(te_matmul(), db, target), autosched.load_kernel(db, result.task.key)):
        np.testing.assert_allclose(_run(kernel, te_matmul(), inputs), untuned, rtol=1e-4, atol=1e-5)
    assert autosched.open_database(db).task(result.task.key).name == "mm_relu"
    again = autosched.tune(te_matmul(), target, db=db, config=TINY.replace(n_trials=6))  # resumes
    assert again.task.key == result.task.key and again.n_new == 2 and again.n_measured == 6


@pytest.mark.slow
def test_tune_a_tvmscript_primfunc(program_file, target, tmp_path):
    func, name = load_program(f"{program_file(SCALE_SOURCE)}:scale")
    db = str(tmp_path / "ts.db")
    result = autosched.tune(func, target, db=db, config=TINY, name=name)
    assert result.best is not None
    kernel = compile_program(func, db, target)
    x = np.arange(64, dtype="float32")
    dev = cpu_device()
    out = tvm.runtime.empty((64,), "float32", dev)
    kernel["main"](tvm.runtime.tensor(x, dev), out)
    np.testing.assert_allclose(out.numpy(), 2 * x)
    assert isinstance(autosched.best_module(db, result.task.key), IRModule)


@pytest.mark.slow
def test_tune_a_relax_module_as_a_model(target, tmp_path):
    db = str(tmp_path / "relax.db")
    mod = relax_linear()
    result = autosched.tune(mod, target, db=db, config=TINY, name="tiny")
    assert result.n_tasks >= 1 and len(result.states) == result.n_tasks
    compiled = compile_program(mod, db, target)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype("float32")
    tuned, untuned = compiled(x)[0], compile_program(mod, None, target)(x)[0]
    assert compiled.counts()["tuned"] >= 1
    np.testing.assert_allclose(tuned, untuned, rtol=1e-4, atol=1e-5)
