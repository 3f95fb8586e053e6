from __future__ import annotations

import pytest

from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import Task, make_target, op_task


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` run only where a CUDA driver (libcuda) and a device are present."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_tests and not _has_cuda_device():
        skip = pytest.mark.skip(reason="needs a CUDA GPU: no libcuda or no device on this machine")
        for item in gpu_tests:
            item.add_marker(skip)


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
