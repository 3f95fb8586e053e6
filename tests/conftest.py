from __future__ import annotations

import pytest

from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import Task, make_target, op_task


def pytest_addoption(parser):
    parser.addoption("--corpus", action="store_true",
                     help="also run the whole model corpus (tests marked corpus; CI's second step)")


DEFAULT_LEFT_OUT = ("long", "arm")  # each a CI step of its own (.ci/run); an explicit -m selects them


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m filter, which then sees the markers added here
def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` run only where a CUDA driver (libcuda) and a device are present; those marked ``corpus``
    (the rest of the model corpus) only with --corpus. Tests of a PostgreSQL server (the ``postgres_url`` fixture)
    are ``long``. Without ``-m``, tests marked ``long`` or ``arm`` are left out (deselected): the README's test
    command is the fast suite, CI runs the rest as steps of their own (``pytest -m long``, ``pytest -m arm``)."""
    for item in items:
        if "postgres_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.long)
    if not config.option.markexpr:
        left_out = [item for item in items if any(item.get_closest_marker(m) for m in DEFAULT_LEFT_OUT)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            dropped = set(left_out)
            items[:] = [item for item in items if item not in dropped]
    gpu_tests = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_tests and not _has_cuda_device():
        skip = pytest.mark.skip(reason="needs a CUDA GPU: no libcuda or no device on this machine")
        for item in gpu_tests:
            item.add_marker(skip)
    if not config.getoption("--corpus"):
        skip = pytest.mark.skip(reason="the whole model corpus runs with --corpus (CI runs it: .ci/run)")
        for item in items:
            if item.get_closest_marker("corpus") is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def nothing_runs_where_its_cpu_features_are_missing():
    """Every test: code built for an LLVM target this CPU cannot run (``targets.runs_here``: another CPU's
    instructions, AMX or AVX-512 FP16 on a machine without them) is never executed here. ``tvm.compile`` tags what it
    returns; running such a build (its VM, its functions, its module's functions) fails the test with the reason,
    where the CPU would kill pytest with SIGILL. Inspecting and exporting it stays allowed."""
    from autosched._tvm import relax, tvm
    from autosched.targets import why_not_here

    compile_, vm_init, executable = tvm.compile, relax.VirtualMachine.__init__, tvm.runtime.Executable

    def refuse(target) -> None:
        pytest.fail(f"a test ran code built for {target} here, where {why_not_here(target)}: skip it on such a CPU "
                    "(targets.runs_here), or build it for this one", pytrace=True)

    def compile_and_tag(mod, target=None, *args, **kwargs):
        built = compile_(mod, target, *args, **kwargs)
        target = tvm.target.Target(target) if isinstance(target, str) else target
        if isinstance(built, executable) and target is not None and target.kind.name == "llvm" \
                and why_not_here(target):
            built.mod = _Unrunnable(built.mod, lambda: refuse(target))
            built._autosched_unrunnable = target
        return built

    def vm_checked(self, rt_mod, *args, **kwargs):
        if (target := getattr(rt_mod, "_autosched_unrunnable", None)) is not None:
            refuse(target)
        return vm_init(self, rt_mod, *args, **kwargs)

    original = (executable.__getitem__, executable.__call__)
    executable.__getitem__ = lambda self, name: (_check(self, refuse), original[0](self, name))[1]
    executable.__call__ = lambda self, *a, **k: (_check(self, refuse), original[1](self, *a, **k))[1]
    tvm.compile, relax.VirtualMachine.__init__ = compile_and_tag, vm_checked
    yield
    tvm.compile, relax.VirtualMachine.__init__ = compile_, vm_init
    executable.__getitem__, executable.__call__ = original


def _check(built, refuse) -> None:
    if (target := getattr(built, "_autosched_unrunnable", None)) is not None:
        refuse(target)


class _Unrunnable:
    """A runtime module whose functions must not run here: looking one up fails; everything else passes through."""

    def __init__(self, module, refuse):
        self._module, self._refuse = module, refuse

    def __getitem__(self, name):
        self._refuse()

    def get_function(self, *args, **kwargs):
        self._refuse()

    def __getattr__(self, name):
        return getattr(self._module, name)


def _has_cuda_device() -> bool:
    from autosched.targets import has_device

    return has_device("cuda")


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database on the server of AUTOSCHED_TEST_POSTGRES_URL, dropped afterwards."""
    import os
    import uuid

    server = os.environ.get("AUTOSCHED_TEST_POSTGRES_URL")
    if not server:
        pytest.skip("no PostgreSQL server: set AUTOSCHED_TEST_POSTGRES_URL=postgresql://user:pw@host/db to run")
    pytest.importorskip("psycopg", reason="PostgreSQL needs the psycopg driver (pip install 'autosched[postgres]')")
    import sqlalchemy as sa

    name = f"autosched_test_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"create database {name}"))
    try:
        yield sa.make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"drop database if exists {name} with (force)"))
        admin.dispose()


@pytest.fixture(scope="session")
def cpu_target():
    return make_target("llvm", 1)


@pytest.fixture(scope="session")
def matmul_task(cpu_target) -> Task:
    return op_task("matmul", (32, 32, 32), cpu_target, settings_for(cpu_target).version)


@pytest.fixture(scope="session")
def matmul_space(matmul_task) -> TraceSearchSpace:
    return TraceSearchSpace(matmul_task.mod, matmul_task.target, settings_for(matmul_task.target), seed=0)


@pytest.fixture()
def onnx_file(tmp_path):
    """Write a ModelProto to a file and return its path."""

    def write(proto, name="model.onnx"):
        path = tmp_path / name
        import onnx

        onnx.save(proto, str(path))
        return path

    return write


@pytest.fixture(scope="session")
def mlp_artifact(tmp_path_factory) -> dict:
    """``autosched compile -o`` of a tiny MLP (ONNX, x: 2x16 -> 8) from a database with one real schedule per task,
    built once per session for the tests of artifacts from the command line (tests/cli/test_artifact_commands.py,
    tests/test_fuzz_inputs.py): {"code", "path" (the .autosched file), "db", "model" (the .onnx file), "tmp"}.
    Tests copy it before changing it."""
    pytest.importorskip("onnx")
    import onnx
    from onnx_graphs import mlp
    from tuned_records import record_one_schedule_per_task

    from autosched.cli import main
    from autosched.db import open_database
    from autosched.graph.frontends import load_model

    tmp = tmp_path_factory.mktemp("mlp_artifact")
    model_path, db = tmp / "mlp.onnx", tmp / "mlp.db"
    onnx.save(mlp(), str(model_path))
    with open_database(str(db)) as database:
        record_one_schedule_per_task(load_model(str(model_path), {"x": (2, 16)}), make_target("llvm", 1), database)
    artifact = tmp / "mlp.autosched"
    args = ["--log", str(tmp / "log"), "compile", str(model_path), "--input", "x:2x16", "--threads", "1", "--db",
            str(db), "-o", str(artifact)]
    return {"code": main(args), "path": artifact, "db": db, "model": model_path, "tmp": tmp}
