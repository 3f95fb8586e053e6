"""The default database: SQLite through SQLAlchemy (a PostgreSQL URL works the same).

Optuna's RDB storage shares the database, so studies resume with the records. A file that is not an
autosched database is refused before anything is written to it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from autosched.db.base import SCHEMA_VERSION, Database, TaskRow
from autosched.errors import DatabaseError
from autosched.records import Status, TuningRecord

log = logging.getLogger("autosched.db")

_META = sa.MetaData()
meta_table = sa.Table("autosched_meta", _META, sa.Column("key", sa.String(64), primary_key=True),
                      sa.Column("value", sa.Text, nullable=False))
task_table = sa.Table(
    "autosched_tasks", _META,
    sa.Column("task_key", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("space_version", sa.Integer, nullable=False),
    sa.Column("workload_json", sa.Text, nullable=False),
    sa.Column("flops", sa.Float, nullable=False),
    sa.Column("info", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)
record_table = sa.Table(
    "autosched_records", _META,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_key", sa.String(64), sa.ForeignKey("autosched_tasks.task_key"), nullable=False, index=True),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("decisions", sa.Text, nullable=False),
    sa.Column("trace", sa.Text),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("latencies_s", sa.Text, nullable=False),
    sa.Column("latency_s", sa.Float),  # median, NULL unless OK: lets SQL find the best
    sa.Column("error", sa.Text),
    sa.Column("autosched_version", sa.String(32), nullable=False),
    sa.Column("tvm_version", sa.String(32), nullable=False),
    sa.Column("space_version", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("predicted_score", sa.Float),
)

SQLITE_MAGIC = b"SQLite format 3\x00"


def to_url(path_or_url: str) -> str:
    return path_or_url if "://" in path_or_url else f"sqlite:///{os.path.abspath(path_or_url)}"


def _check_sqlite_file(path: Path) -> None:
    """Refuse unwritable places and files that are not SQLite before SQLAlchemy touches them."""
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory: give a file path for the database, e.g. tuning_logs/x.db")
    if path.exists():
        with open(path, "rb") as f:
            head = f.read(16)
        if head and head != SQLITE_MAGIC:
            raise DatabaseError(f"{path} is not an autosched database (not SQLite): pick another --db path")
        if not os.access(path, os.W_OK):
            raise DatabaseError(f"database {path} is not writable: fix its permissions or pick another --db path")
        return
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DatabaseError(
            f"cannot create folder {parent} for the database ({err.strerror}): pick another --db path"
        ) from err
    if not os.access(parent, os.W_OK):
        raise DatabaseError(f"folder {parent} is not writable: pick another --db path")


class SQLDatabase(Database):
    def __init__(self, path_or_url: str, create: bool = True):
        self.url = to_url(path_or_url)
        if self.url.startswith("sqlite:///") and ":memory:" not in self.url:
            path = Path(self.url[len("sqlite:///"):])
            if not create and not path.exists():
                raise DatabaseError(f"database {path} does not exist: check the --db path")
            _check_sqlite_file(path)
        try:
            self.engine = sa.create_engine(self.url)
            self._check_schema(create)
        except sa.exc.SQLAlchemyError as err:
            raise DatabaseError(f"cannot open database {path_or_url}: {str(err).splitlines()[0]}") from err
        self._storage: Any = None

    def _check_schema(self, create: bool) -> None:
        names = set(sa.inspect(self.engine).get_table_names())
        if "autosched_meta" in names:
            with self.engine.connect() as conn:
                row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")).first()
            version = int(row[0]) if row else -1
            if version == 1:
                self._migrate_v1()
            elif version != SCHEMA_VERSION:
                raise DatabaseError(
                    f"database {self.url} has schema version {version}, this autosched reads {SCHEMA_VERSION}: "
                    "export it with the autosched that wrote it, or use a new --db"
                )
            return
        if names:
            raise DatabaseError(
                f"{self.url} is not an autosched database (it has other tables): pick another --db path"
            )
        if not create:
            raise DatabaseError(f"{self.url} is empty, not an autosched database: check the --db path")
        _META.create_all(self.engine)
        with self.engine.begin() as conn:
            conn.execute(meta_table.insert(), [{"key": "schema_version", "value": str(SCHEMA_VERSION)},
                                               {"key": "created_at", "value": str(time.time())}])

    def _migrate_v1(self) -> None:
        """v1 -> v2: records gained a nullable predicted_score column (additive, in one transaction)."""
        with self.engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE autosched_records ADD COLUMN predicted_score FLOAT"))
            conn.execute(meta_table.update().where(meta_table.c.key == "schema_version").values(value="2"))
        log.info("migrated %s from schema v1 to v2", self.url)

    # --- tasks ---------------------------------------------------------------------------------------------
    def commit_task(self, task: TaskRow) -> None:
        with self.engine.begin() as conn:
            if conn.execute(sa.select(task_table.c.task_key).where(task_table.c.task_key == task.task_key)).first():
                return
            conn.execute(task_table.insert().values(
                task_key=task.task_key, name=task.name, target=task.target, space_version=task.space_version,
                workload_json=task.workload_json, flops=task.flops, info=json.dumps(task.info), created_at=time.time(),
            ))

    def tasks(self) -> list[TaskRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(task_table).order_by(task_table.c.created_at)).mappings().all()
        return [TaskRow(r["task_key"], r["name"], r["target"], r["space_version"], r["workload_json"], r["flops"],
                        json.loads(r["info"])) for r in rows]

    # --- records -------------------------------------------------------------------------------------------
    def commit(self, records: list[TuningRecord]) -> None:
        if not records:
            return
        rows = [{
            "task_key": r.task_key, "target": r.target, "params": json.dumps(r.params),
            "decisions": json.dumps(r.decisions), "trace": json.dumps(r.trace_json), "status": r.status.value,
            "latencies_s": json.dumps(r.latencies_s),
            "latency_s": r.latency_s if r.status is Status.OK and r.latencies_s else None, "error": r.error,
            "autosched_version": r.autosched_version, "tvm_version": r.tvm_version,
            "space_version": r.space_version, "created_at": r.created_at, "predicted_score": r.predicted_score,
        } for r in records]
        with self.engine.begin() as conn:  # one transaction: a batch lands whole or not at all
            conn.execute(record_table.insert(), rows)

    def records(self, task_key: str | None = None) -> list[TuningRecord]:
        query = sa.select(record_table).order_by(record_table.c.id)
        if task_key is not None:
            query = query.where(record_table.c.task_key == task_key)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_to_record(r) for r in rows]

    def best(self, task_key: str, target: str | None = None) -> TuningRecord | None:
        query = (sa.select(record_table).where(record_table.c.task_key == task_key)
                 .where(record_table.c.latency_s.is_not(None)).order_by(record_table.c.latency_s).limit(1))
        if target is not None:
            query = query.where(record_table.c.target == target)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _to_record(row) if row else None

    def optuna_storage(self) -> Any:
        if self._storage is None:
            import optuna

            self._storage = optuna.storages.RDBStorage(self.url)
        return self._storage

    def close(self) -> None:
        if self._storage is not None:
            self._storage.remove_session()
            self._storage.engine.dispose()
        self.engine.dispose()


def _to_record(r: Any) -> TuningRecord:
    return TuningRecord(
        task_key=r["task_key"], target=r["target"], params=json.loads(r["params"]),
        decisions=json.loads(r["decisions"]), trace_json=json.loads(r["trace"]) if r["trace"] else None,
        status=Status(r["status"]), latencies_s=json.loads(r["latencies_s"]), error=r["error"],
        autosched_version=r["autosched_version"], tvm_version=r["tvm_version"], space_version=r["space_version"],
        created_at=r["created_at"], predicted_score=r["predicted_score"], record_id=r["id"],
    )
