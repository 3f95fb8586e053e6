from __future__ import annotations

import pytest

from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import Task, make_target, op_task


@pytest.fixture(scope="session")
def cpu_target():
    return make_target("llvm", 1)


@pytest.fixture(scope="session")
def matmul_task(cpu_target) -> Task:
    return op_task("matmul", (32, 32, 32), cpu_target, settings_for(cpu_target).version)


@pytest.fixture(scope="session")
def matmul_space(matmul_task) -> TraceSearchSpace:
    return TraceSearchSpace(matmul_task.mod, matmul_task.target, settings_for(matmul_task.target), seed=0)
