"""Contract tests run against every Database implementation, plus SQL-specific safety checks."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from autosched.db import MemoryDatabase, SQLDatabase, TaskRow, open_database
from autosched.db.transfer import export_jsonl, import_jsonl, read_jsonl
from autosched.errors import DatabaseError, UserInputError
from autosched.records import Status, TuningRecord


def _task(key="k1"):
    return TaskRow(key, "matmul_8x8x8", '{"kind": "llvm"}', 1, "{}", 1024.0, {"op": "matmul"})


def _rec(lat, status=Status.OK, key="k1", target='{"kind": "llvm"}', decisions=None):
    return TuningRecord(key, target, {"a": 1}, decisions or [[1, 2], lat], [["inst"], []], status,
                        [lat] * 3 if status is Status.OK else [], None if status is Status.OK else "err",
                        "0.1.0", "0.27", 1)


@pytest.fixture(params=["memory", "sqlite"])
def db(request, tmp_path):
    d = MemoryDatabase() if request.param == "memory" else SQLDatabase(str(tmp_path / "t.db"))
    d.commit_task(_task())
    yield d
    d.close()


def test_commit_and_read_back(db):
    db.commit([_rec(3e-3), _rec(1e-3), _rec(2e-3, Status.TIMEOUT)])
    recs = db.records("k1")
    assert [r.status for r in recs] == [Status.OK, Status.OK, Status.TIMEOUT]
    assert recs[1].latencies_s == [1e-3] * 3 and recs[1].trace_json == [["inst"], []]
    assert db.records("other") == []


def test_best_is_the_fastest_valid_record_for_the_target(db):
    db.commit([_rec(3e-3), _rec(1e-3, target='{"kind": "cuda"}'), _rec(2e-3), _rec(0.5e-3, Status.WRONG_RESULT)])
    assert db.best("k1").latency_s == 1e-3
    assert db.best("k1", '{"kind": "llvm"}').latency_s == 2e-3
    assert db.best("missing") is None


def test_rejected_candidates_do_not_count_as_measured(db):
    db.commit([_rec(1e-3), _rec(0, Status.INVALID), _rec(0, Status.BUILD_ERROR)])
    assert db.n_measured("k1") == 2


def test_tasks_are_stored_once(db):
    db.commit_task(_task())
    db.commit_task(_task("k2"))
    assert [t.task_key for t in db.tasks()] == ["k1", "k2"] and db.task("k2").info == {"op": "matmul"}


def test_sqlite_survives_reopening(tmp_path):
    path = str(tmp_path / "a.db")
    d = SQLDatabase(path)
    d.commit_task(_task())
    d.commit([_rec(1e-3)])
    d.close()
    again = open_database(path)
    assert again.best("k1").latency_s == 1e-3


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_refuses_a_file_that_is_not_sqlite_and_leaves_it_alone(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("just some text\n")
    before = _digest(path)
    with pytest.raises(DatabaseError, match="not an autosched database"):
        SQLDatabase(str(path))
    assert _digest(path) == before


def test_refuses_a_foreign_sqlite_database_and_leaves_it_alone(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table customers (id integer)")
    before = _digest(path)
    with pytest.raises(DatabaseError, match="not an autosched database"):
        SQLDatabase(str(path))
    assert _digest(path) == before


def test_refuses_another_schema_version(tmp_path):
    path = tmp_path / "old.db"
    SQLDatabase(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("update autosched_meta set value='99' where key='schema_version'")
    with pytest.raises(DatabaseError, match="schema version 99"):
        SQLDatabase(str(path))


def test_refuses_an_unwritable_place(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DatabaseError, match="cannot create folder|not writable"):
        SQLDatabase(str(blocker / "sub" / "x.db"))


def test_optuna_study_lives_in_the_same_sqlite_file(tmp_path):
    path = tmp_path / "s.db"
    d = SQLDatabase(str(path))
    import optuna

    optuna.create_study(study_name="x", storage=d.optuna_storage())
    d.close()
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert {"autosched_records", "autosched_tasks", "studies", "trials"} <= tables


def test_export_import_round_trip(db, tmp_path):
    db.commit([_rec(1e-3), _rec(2e-3, Status.RUN_ERROR)])
    path = tmp_path / "x.jsonl"
    assert export_jsonl(db, path) == (1, 2)
    target = SQLDatabase(str(tmp_path / "copy.db"))
    assert import_jsonl(target, *read_jsonl(path)) == (1, 2)
    assert import_jsonl(target, *read_jsonl(path)) == (0, 0)  # importing twice adds nothing
    assert [r.to_json() for r in target.records()] == [r.to_json() for r in db.records()]


def test_import_refuses_garbage(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"hello": 1}\n')
    with pytest.raises(UserInputError, match="not an autosched export"):
        read_jsonl(path)


def test_export_import_gzip(db, tmp_path):
    db.commit([_rec(1e-3)])
    path = tmp_path / "x.jsonl.gz"
    export_jsonl(db, path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    tasks, records, _ = read_jsonl(path)
    assert len(tasks) == 1 and records[0].latency_s == 1e-3


@pytest.mark.parametrize("attempt", range(3))  # a race: most rounds lost it before the fix
def test_many_tuners_opening_a_new_postgresql_database_at_once_all_succeed(postgres_url, attempt, n_openers=16):
    """Workers started together on an empty database race to create its tables; the losers retry, none fails."""
    import threading

    barrier, errors, opened = threading.Barrier(n_openers), [], []

    def open_it():
        barrier.wait()
        try:
            opened.append(SQLDatabase(postgres_url))
        except Exception as err:  # noqa: BLE001 - collected and reported below
            errors.append(err)

    threads = [threading.Thread(target=open_it) for _ in range(n_openers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(opened) == n_openers
    opened[0].commit_task(TaskRow("k", "dense", "llvm", "1", "{}", 1.0, {}))
    assert [t.task_key for t in opened[-1].tasks()] == ["k"]
    for db in opened:
        db.engine.dispose()


def test_a_database_is_named_without_its_password_and_closes_as_a_context(tmp_path):
    from autosched.db import display_name

    assert display_name("postgresql://tuner:s3cret@db.example:5432/runs") == "postgresql://tuner:***@db.example:5432/runs"
    assert display_name("tuning_logs/x.db") == "tuning_logs/x.db"
    with open_database(str(tmp_path / "a.db")) as db:
        assert db.display_name == str(tmp_path / "a.db")
        db.commit_task(TaskRow("k", "t", "{}", 1, "{}", 1.0, {}))
    assert db.engine.pool.checkedout() == 0  # closed: no connection held
    with open_database(str(tmp_path / "a.db"), create=False) as again:
        assert [t.task_key for t in again.tasks()] == ["k"]
