"""``import`` of a bad or cut-short export: one line, exit 2, the database as it was; ``show``/``report``/``export``
open the database read-only: a file without write permission works, its bytes stay as they were (an older schema is
not migrated)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from autosched.cli import main
from autosched.db import SQLDatabase, TaskRow, open_database
from autosched.records import Status, TuningRecord

FIXTURE_V1 = Path(__file__).resolve().parents[1] / "fixtures" / "db_v1.db"
SHIPPED = Path(__file__).resolve().parents[2] / "tuning_logs" / "example_mlp.jsonl.gz"


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _counts(path):
    with open_database(str(path), read_only=True) as db:
        return len(db.tasks()), len(db.records())


@pytest.fixture()
def target(tmp_path):
    """A database that already holds a task and a record."""
    path = tmp_path / "target.db"
    with SQLDatabase(str(path)) as db:
        db.commit_task(TaskRow("k0", "task_k0", '{"kind": "llvm"}', 1, "{}", 1e6, {}))
        db.commit([TuningRecord("k0", '{"kind": "llvm"}', {}, [], None, Status.OK, [1e-3], None, "0.1", "0.27", 1)])
    return path


def _bad_export(tmp_path, line_number, field, value):
    """The shipped log (no trailer: an older export) with one field of one record line changed."""
    import gzip

    with gzip.open(SHIPPED, "rt") as f:
        lines = f.read().splitlines()
    item = json.loads(lines[line_number - 1])
    item["record"][field] = value
    lines[line_number - 1] = json.dumps(item)
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("field,value", [("status", None), ("latencies_s", [-1.0]), ("params", "x")])
def test_importing_a_bad_record_is_one_line_exit_2_and_the_database_unchanged(tmp_path, target, capsys, field,
                                                                               value):
    bad = _bad_export(tmp_path, 300, field, value)  # line 300: a record, after all 6 tasks
    before = _counts(target)
    assert main(["import", str(bad), "--db", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "line 300" in err and repr(field) in err, err
    assert _counts(target) == before == (1, 1)


@pytest.mark.parametrize("content,message", [("[]\n", "not an autosched export"),
                                             ('{"format": "autosched-export", "schema_version": 2, '
                                              '"export_version": 2}\n', "cut short")])
def test_importing_a_bad_header_or_a_cut_short_file_is_exit_2(tmp_path, target, capsys, content, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    before = _digest(target)
    assert main(["import", str(bad), "--db", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert _digest(target) == before


def test_export_then_import_round_trips_through_the_cli(tmp_path, target, capsys):
    out = tmp_path / "x.jsonl.gz"
    assert main(["export", "--db", str(target), "-o", str(out)]) == 0
    assert main(["import", str(out), "--db", str(tmp_path / "copy.db")]) == 0
    assert _counts(tmp_path / "copy.db") == (1, 1)


def _read_only_commands(db, tmp_path):
    return [["show", "--db", str(db)], ["report", "--db", str(db), "-o", str(tmp_path / "out" / "r.json")],
            ["export", "--db", str(db), "-o", str(tmp_path / "out" / "x.jsonl")]]


@pytest.mark.parametrize("folder_writable", [True, False])
def test_read_only_commands_work_on_a_database_without_write_permission(tmp_path, target, capsys, folder_writable):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "target.db"
    shutil.move(target, db)
    db.chmod(0o444)
    if not folder_writable:
        folder.chmod(0o555)
    before = _digest(db)
    try:
        for cmd in _read_only_commands(db, tmp_path):
            assert main(cmd) == 0, capsys.readouterr().err
    finally:
        folder.chmod(0o755)
    assert _digest(db) == before
    assert "task_k0" in capsys.readouterr().out


def test_read_only_commands_do_not_migrate_an_older_database(tmp_path, capsys):
    db = tmp_path / "v1.db"
    shutil.copy(FIXTURE_V1, db)
    before = _digest(db)
    for cmd in _read_only_commands(db, tmp_path):
        assert main(cmd) == 0, capsys.readouterr().err
        assert _digest(db) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("select value from autosched_meta where key='schema_version'").fetchone() == ("1",)
    assert "matmul_16x16x16" in capsys.readouterr().out
    assert _counts(tmp_path / "out" / "x.jsonl") == (1, 4)  # its records, exported as the current schema


def test_a_wal_database_without_write_permission_can_be_shown(tmp_path, target, capsys):
    with sqlite3.connect(target) as conn:
        assert conn.execute("pragma journal_mode=wal").fetchone() == ("wal",)
    target.chmod(0o444)
    before = _digest(target)
    assert main(["show", "--db", str(target)]) == 0
    assert _digest(target) == before and "task_k0" in capsys.readouterr().out


def test_a_read_only_open_cannot_write_even_where_permissions_would_allow_it(target):
    """The connection itself is read-only (true even for root, whom file permissions do not stop)."""
    with open_database(str(target), read_only=True) as db, db.engine.connect() as conn:
        with pytest.raises(sa.exc.OperationalError, match="readonly"):
            conn.exec_driver_sql("DELETE FROM autosched_records")
    assert _counts(target) == (1, 1)


def test_a_read_only_open_of_a_missing_database_creates_nothing(tmp_path, capsys):
    assert main(["show", "--db", str(tmp_path / "nope.db")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "nope.db").exists()


def test_report_reads_the_optuna_studies_of_a_database_without_write_permission(tmp_path, target, capsys):
    import optuna

    with SQLDatabase(str(target)) as db:
        study = optuna.create_study(study_name="k0", storage=db.optuna_storage())
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1e-3))
        db.optuna_storage().remove_session()
    target.chmod(0o444)
    before = _digest(target)
    assert main(["report", "--db", str(target), "-o", str(tmp_path / "r.json")]) == 0, capsys.readouterr().err
    assert _digest(target) == before
    assert json.loads((tmp_path / "r.json").read_text())["tasks"]


def test_a_read_only_open_that_sqlite_refuses_falls_back_to_immutable(target, monkeypatch):
    """Where a plain read-only open fails (a WAL file whose -shm only a writer could make: not reproducible as
    root), the file is read as immutable."""
    import autosched.db.sql as sql_module

    real = sa.create_engine

    def create_engine(url, **kwargs):
        if "mode=ro" in url and "immutable" not in url:
            def refuse():
                raise sqlite3.OperationalError("unable to open database file")
            return real("sqlite://", creator=refuse)
        return real(url, **kwargs)

    monkeypatch.setattr(sql_module.sa, "create_engine", create_engine)
    with open_database(str(target), read_only=True) as db:
        assert db._engine_url.endswith("&immutable=1") and len(db.records()) == 1
