"""Commands that only read a tuning database (``compile``, ``run``, ``doctor``, training a cost model's reading
side) open it read-only: a file and folder without write permission work, the file's bytes and mtime stay as they
were, and an older-format (v1) database is read as it is, never migrated. (Run as root, permissions do not bind:
there the v1 and mtime checks are what fail on a read-write open.)"""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest
from onnx_graphs import mlp
from test_database_commands import FIXTURE_V1, _digest

from autosched.cli import main
from autosched.db import SQLDatabase

pytest.importorskip("onnxruntime")


def _schema_version(path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute("select value from autosched_meta where key='schema_version'").fetchone()[0]


def _commands(model, db, out):
    """compile (artifact and bare library), run and doctor, each reading ``db``."""
    common = [str(model), "--threads", "1", "--db", str(db)]
    return [
        ["compile", *common, "-o", str(out / "m.autosched")],
        ["compile", *common, "-o", str(out / "m.so")],
        ["run", *common, "--repeat", "2"],
        ["doctor", "--db", str(db), "--json"],
    ]


@pytest.fixture()
def no_shipped_logs(monkeypatch):
    from autosched import doctor

    monkeypatch.setattr(doctor, "shipped_logs", lambda: [])  # doctor reads only the database under test


def test_compile_and_doctor_work_on_a_database_without_write_permission(tmp_path, onnx_file, capsys, no_shipped_logs):
    folder, out = tmp_path / "ro", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    db = folder / "mlp.db"
    SQLDatabase(str(db)).close()  # a current-format database (no records: default schedules)
    model = onnx_file(mlp(batch=2, d_in=8, hidden=16), "mlp.onnx")
    db.chmod(0o444)
    folder.chmod(0o555)
    before, mtime = _digest(db), os.stat(db).st_mtime_ns
    try:
        for cmd in _commands(model, db, out):
            assert main(cmd) == 0, (cmd, capsys.readouterr().err)
        assert sorted(p.name for p in folder.iterdir()) == ["mlp.db"]  # no journal, -wal or -shm left beside it
    finally:
        folder.chmod(0o755)
    assert _digest(db) == before and os.stat(db).st_mtime_ns == mtime
    assert (out / "m.autosched").exists() and (out / "m.so").exists()


def test_compile_and_doctor_do_not_migrate_an_older_database(tmp_path, onnx_file, capsys, no_shipped_logs):
    db, out = tmp_path / "v1.db", tmp_path / "out"
    out.mkdir()
    shutil.copy(FIXTURE_V1, db)
    before = _digest(db)
    model = onnx_file(mlp(batch=2, d_in=8, hidden=16), "mlp.onnx")
    for cmd in _commands(model, db, out):
        assert main(cmd) == 0, (cmd, capsys.readouterr().err)
        assert _digest(db) == before and _schema_version(db) == "1", cmd
    assert '"n_records": 4' in capsys.readouterr().out  # doctor read its records as they are


def test_training_a_cost_model_reads_an_older_database_without_migrating_it(tmp_path):
    from autosched.cost.training import dataset_from_databases
    from autosched.errors import UserInputError

    db = tmp_path / "v1.db"
    shutil.copy(FIXTURE_V1, db)
    before = _digest(db)
    try:
        dataset_from_databases([str(db)])
    except UserInputError:  # too few records to train on: the reading side is what is checked
        pass
    assert _digest(db) == before and _schema_version(db) == "1"
