"""A database written by an earlier autosched (schema v1, tests/fixtures/db_v1.db) still loads and applies;
opening it for writing migrates it to the current schema."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from autosched._tvm import cpu_device, load_json, tvm
from autosched.api import best_module
from autosched.db import open_database
from autosched.records import Status
from autosched.tasks import make_target

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "db_v1.db"


def test_v1_database_loads_and_its_best_kernel_is_correct(tmp_path):
    path = tmp_path / "v1.db"
    shutil.copy(FIXTURE, path)  # never write to the fixture itself
    db = open_database(str(path), create=False)
    (task,) = db.tasks()
    assert task.info == {"op": "matmul", "shape": [16, 16, 16]} and task.space_version == 1
    recs = db.records(task.task_key)
    assert len(recs) == 4 and all(r.status is Status.OK for r in recs)
    assert all(r.predicted_score is None for r in recs)  # added in schema v2
    kernel = tvm.compile(best_module(db, task.task_key), target=make_target("llvm")).mod  # this machine's CPU
    dev = cpu_device()
    a, b = (np.random.default_rng(i).random((16, 16), dtype=np.float32) for i in (0, 1))
    out = tvm.runtime.empty((16, 16), "float32", dev)
    kernel["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4)
    assert load_json(task.workload_json) is not None
