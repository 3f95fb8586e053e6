"""The default database: SQLite through SQLAlchemy (a PostgreSQL URL works the same).

Optuna's RDB storage shares the database, so studies resume with the records. A file that is not an
autosched database is refused before anything is written to it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from autosched.db.base import (
    LEASE_S,
    SCHEMA_VERSION,
    Claim,
    Database,
    Selection,
    TaskRow,
    display_name,
    matched_selections,
)
from autosched.errors import DatabaseError
from autosched.masking import mask_secrets
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

# Workers' leases on tasks (see autosched/db/leases.py). Not part of the schema version: created where missing on
# first use (older databases gain it then), never exported. No foreign key: a task is claimed before it is stored.
claim_table = sa.Table(
    "autosched_claims", _META,
    sa.Column("task_key", sa.String(64), primary_key=True),
    sa.Column("worker_id", sa.String(255), nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),  # seconds since the epoch, by the database's clock
    sa.Column("n_trials", sa.Integer, nullable=False),
)

# Schedules chosen inside a model (deploy/in_model.py), one per task (its key names its target). Like the claims,
# created where missing on first write, so older databases gain it then; a database without it has no choices.
selection_table = sa.Table(
    "autosched_selections", _META,
    sa.Column("task_key", sa.String(64), primary_key=True),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("record_id", sa.Integer, nullable=False),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("in_model_s", sa.Float),  # NULL: not timed inside the model (a light task)
    sa.Column("model_s", sa.Float, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

SQLITE_MAGIC = b"SQLite format 3\x00"


def to_url(path_or_url: str) -> str:
    return path_or_url if "://" in path_or_url else f"sqlite:///{os.path.abspath(path_or_url)}"


def _check_sqlite_file(path: Path, read_only: bool = False) -> None:
    """Refuse unwritable places (unless only reading) and files that are not SQLite before SQLAlchemy touches
    them."""
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory: give a file path for the database, e.g. tuning_logs/x.db")
    if path.exists():
        try:
            with open(path, "rb") as f:
                head = f.read(16)
        except OSError as err:
            raise DatabaseError(f"cannot read database {path} ({err.strerror}): pick another --db path") from err
        if head and head != SQLITE_MAGIC:
            raise DatabaseError(f"{path} is not an autosched database (not SQLite): pick another --db path")
        if not read_only and not os.access(path, os.W_OK):
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


SQLITE_WAIT_S = 60  # how long a SQLite write waits for another tuner's to end
RELEASE_WAIT_S = 2  # ... and a claim's release (see SQLDatabase.release)


class SQLDatabase(Database):
    _claims_ready = False  # the claims table is known to exist
    _selections_ready = False  # ... and the selections table
    _scored = True  # records have a predicted_score column (schema v2; a v1 database opened read-only has none)

    @property
    def display_name(self) -> str:
        """The database's path (SQLite) or its URL without the password."""
        return self.url[len("sqlite:///"):] if self.url.startswith("sqlite:///") else display_name(self.url)

    def __init__(self, path_or_url: str, create: bool = True, read_only: bool = False):
        """``read_only`` (show, report, export): a SQLite file is opened read-only (a file or folder without write
        permission is fine), nothing is created or migrated: an older schema is read as it is."""
        self.url = to_url(path_or_url)
        self.read_only = read_only
        self._engine_url = self.url
        create = create and not read_only
        if self.url.startswith("sqlite:///") and ":memory:" not in self.url:
            path = Path(self.url[len("sqlite:///"):])
            if not create and not path.exists():
                raise DatabaseError(f"database {path} does not exist: check the --db path")
            _check_sqlite_file(path, read_only)
            if read_only:
                self._engine_url = _read_only_url(path)
        try:
            self.engine = self._open_engine()
            self._check_intact()
            _retry_while_another_creates(lambda: self._check_schema(create))
        except sa.exc.SQLAlchemyError as err:
            first_line = str(err).splitlines()[0]
            raise DatabaseError(mask_secrets(f"cannot open database {path_or_url}: {first_line}")) from err
        except ImportError as err:  # a URL whose driver is not installed (postgresql+psycopg://, ...)
            raise DatabaseError(mask_secrets(f"cannot open database {path_or_url}: its driver {err.name or ''} is not "
                                             "installed (pip install it, or give a SQLite path)")) from err
        except (ValueError, TypeError) as err:  # a malformed URL (a port that is not a number, ...)
            raise DatabaseError(mask_secrets(f"cannot open database {path_or_url}: {err}")) from err
        self._storage: Any = None

    def _open_engine(self) -> sa.Engine:
        engine = sa.create_engine(self._engine_url, **self._engine_kwargs())
        if self._engine_url == self.url:
            return engine
        try:  # read-only: a WAL database in a folder we cannot write needs its -shm file, which only a writer makes;
            with engine.connect() as conn:  # such a file is read as immutable (no writer can be at work on it)
                conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
        except sa.exc.OperationalError:
            engine.dispose()
            self._engine_url += "&immutable=1"
            engine = sa.create_engine(self._engine_url, **self._engine_kwargs())
        return engine

    def _engine_kwargs(self) -> dict[str, Any]:
        """SQLite: wait up to 60 s (not 5) for another tuner's write to end, so concurrent tuners queue up."""
        return {"connect_args": {"timeout": SQLITE_WAIT_S}} if self.url.startswith("sqlite") else {}

    def _check_intact(self) -> None:
        """SQLite: a damaged file (truncated, overwritten pages) is refused before anything reads or writes it
        (SQLite's quick_check reads every page: ~0.1 s for 100 MB)."""
        if not self.url.startswith("sqlite:///") or ":memory:" in self.url:
            return
        with self.engine.connect() as conn:
            verdict = conn.exec_driver_sql("PRAGMA quick_check(1)").scalar()
        if verdict != "ok":
            verdict = " ".join(str(verdict).replace("*** in database main ***", "").split())
            raise DatabaseError(f"database {self.url[len('sqlite:///'):]} is damaged ({verdict}): restore it from a "
                                "copy, or use a new --db")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """A database that fails in the middle of a run (disk full, read-only, damaged): one clear line."""
        try:
            yield
        except sa.exc.DatabaseError as err:  # the DBAPI's errors; not our own mistakes (a bad query)
            if isinstance(err, sa.exc.IntegrityError | sa.exc.ProgrammingError):
                raise
            raise DatabaseError(describe_failure(self.url, err)) from err

    def _check_schema(self, create: bool) -> None:
        names = set(sa.inspect(self.engine).get_table_names())
        if "autosched_meta" in names:
            row = None
            for _ in range(300):  # no version yet: another tuner may be creating the database this moment (SQLite
                with self.engine.connect() as conn:  # commits a CREATE TABLE before the row that follows it, whose
                    # insert may queue behind a third tuner's writes: wait up to 60 s, as for any SQLite lock)
                    row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")
                                       ).first()
                if row is not None:
                    break
                time.sleep(0.2)
            version = int(row[0]) if row else -1
            if version == 1 and self.read_only:  # read as it is: records without their predicted_score
                self._scored = False
            elif version == 1:
                self._migrate_v1()
            elif version != SCHEMA_VERSION:
                raise DatabaseError(
                    f"database {self.display_name} has schema version {version}, this autosched reads "
                    f"{SCHEMA_VERSION}: "
                    "export it with the autosched that wrote it, or use a new --db"
                )
            return
        if names:
            raise DatabaseError(
                f"{self.display_name} is not an autosched database (it has other tables): pick another --db path"
            )
        if not create:
            raise DatabaseError(f"{self.display_name} is empty, not an autosched database: check the --db path")
        with self.engine.begin() as conn:  # tables and version in one transaction: never seen half-made
            _META.create_all(conn)
            conn.execute(meta_table.insert(), [{"key": "schema_version", "value": str(SCHEMA_VERSION)},
                                               {"key": "created_at", "value": str(time.time())}])

    def _migrate_v1(self) -> None:
        """v1 -> v2: records gained a nullable predicted_score column (additive, in one transaction)."""
        with self.engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE autosched_records ADD COLUMN predicted_score FLOAT"))
            conn.execute(meta_table.update().where(meta_table.c.key == "schema_version").values(value="2"))
        log.info("migrated %s from schema v1 to v2", self.display_name)

    # --- tasks ---------------------------------------------------------------------------------------------
    def commit_task(self, task: TaskRow) -> None:
        try:
            with self._errors(), self.engine.begin() as conn:
                if conn.execute(sa.select(task_table.c.task_key).where(task_table.c.task_key == task.task_key)).first():
                    return
                conn.execute(task_table.insert().values(**_task_row(task)))
        except sa.exc.IntegrityError:  # another tuner on the same database stored it meanwhile
            if self.task(task.task_key) is None:
                raise

    def tasks(self) -> list[TaskRow]:
        with self._errors(), self.engine.connect() as conn:
            rows = conn.execute(sa.select(task_table).order_by(task_table.c.created_at)).mappings().all()
        return [TaskRow(r["task_key"], r["name"], r["target"], r["space_version"], r["workload_json"], r["flops"],
                        json.loads(r["info"])) for r in rows]

    # --- records -------------------------------------------------------------------------------------------
    def commit(self, records: list[TuningRecord]) -> None:
        if not records:
            return
        with self._errors(), self.engine.begin() as conn:  # one transaction: a batch lands whole or not at all
            conn.execute(record_table.insert(), _record_rows(records))

    def records(self, task_key: str | None = None) -> list[TuningRecord]:
        query = sa.select(*self._record_columns()).order_by(record_table.c.id)
        if task_key is not None:
            query = query.where(record_table.c.task_key == task_key)
        with self._errors(), self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_to_record(r) for r in rows]

    def _record_columns(self) -> list[sa.Column]:
        return [c for c in record_table.c if self._scored or c.name != "predicted_score"]

    def commit_all(self, tasks: list[TaskRow], records: list[TuningRecord], selections: list[dict]) -> None:
        """One transaction: an import lands whole or not at all."""
        if selections:  # DDL first, on its own (SQLite commits it apart anyway): an empty table, as any select makes
            with self._errors():
                _retry_while_another_creates(lambda: self._create(selection_table))
        with self._errors(), self.engine.begin() as conn:
            keys = [t.task_key for t in tasks]
            have = set(conn.execute(sa.select(task_table.c.task_key).where(task_table.c.task_key.in_(keys))).scalars())
            new_tasks = [_task_row(t) for t in tasks if t.task_key not in have]
            if new_tasks:
                conn.execute(task_table.insert(), new_tasks)
            if records:
                conn.execute(record_table.insert(), _record_rows(records))

            def records_of(key: str) -> list[TuningRecord]:
                query = sa.select(record_table).where(record_table.c.task_key == key)
                return [_to_record(r) for r in conn.execute(query).mappings()]

            chosen = matched_selections(selections, records_of)
            if chosen:
                _replace_selections(conn, chosen)

    def n_measured(self, task_key: str) -> int:
        query = (sa.select(sa.func.count()).select_from(record_table).where(record_table.c.task_key == task_key)
                 .where(record_table.c.status != Status.INVALID.value))
        with self._errors(), self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def best(self, task_key: str, target: str | None = None) -> TuningRecord | None:
        query = (sa.select(*self._record_columns()).where(record_table.c.task_key == task_key)
                 .where(record_table.c.latency_s.is_not(None)).order_by(record_table.c.latency_s).limit(1))
        if target is not None:
            query = query.where(record_table.c.target == target)
        with self._errors(), self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _to_record(row) if row else None

    # --- selections (schedules chosen inside a model) ------------------------------------------------------
    def select(self, selections: list[Selection]) -> None:
        if not selections:
            return
        with self._errors():
            _retry_while_another_creates(lambda: self._create(selection_table))
        with self._errors(), self.engine.begin() as conn:  # one transaction: the whole combination or none of it
            _replace_selections(conn, selections)

    def selection(self, task_key: str) -> Selection | None:
        if not self._has_selections():
            return None
        query = sa.select(selection_table).where(selection_table.c.task_key == task_key)
        with self._errors(), self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return Selection(**row) if row else None

    def _has_selections(self) -> bool:
        """Whether the selections table exists (read-only commands never create it)."""
        if not self._selections_ready:  # looked up until it exists (another tuner may create it meanwhile)
            with self._errors():
                self._selections_ready = sa.inspect(self.engine).has_table(selection_table.name)
        return self._selections_ready

    def _create(self, table: sa.Table) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.schema.CreateTable(table, if_not_exists=True))
        self._selections_ready = True

    # --- claims (workers' leases on tasks) --------------------------------------------------------------------
    def _now(self) -> sa.ColumnElement[float]:
        """The database's clock in epoch seconds, so workers on machines whose clocks differ agree on expiry."""
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Float)
        if dialect == "postgresql":
            return sa.cast(sa.literal_column("extract(epoch from clock_timestamp())"), sa.Float)
        return sa.literal(time.time(), sa.Float)  # other servers: this machine's clock

    def _claims_table(self) -> sa.Table:
        """The claims table, created if missing (an older database) with CREATE TABLE IF NOT EXISTS."""
        if not self._claims_ready:
            def create() -> None:
                with self.engine.begin() as conn:
                    conn.execute(sa.schema.CreateTable(claim_table, if_not_exists=True))

            with self._errors():
                _retry_while_another_creates(create)
            self._claims_ready = True
        return claim_table

    def claim(self, task_key: str, worker_id: str, lease_s: float = LEASE_S, n_trials: int = 0) -> bool:
        c, now = self._claims_table().c, self._now()
        values = {"worker_id": worker_id, "expires_at": now + lease_s, "n_trials": n_trials}
        try:  # one transaction: take a row that is ours or expired, else insert one (fails if a live one exists)
            with self._errors(), self.engine.begin() as conn:
                taken = conn.execute(claim_table.update().where(c.task_key == task_key)
                                     .where(sa.or_(c.worker_id == worker_id, c.expires_at < now)).values(**values))
                if taken.rowcount != 1:
                    conn.execute(claim_table.insert().values(task_key=task_key, **values))
        except sa.exc.IntegrityError:  # the row exists: another worker's live claim, or one inserted just now
            return False
        return True

    def renew(self, task_key: str, worker_id: str, lease_s: float = LEASE_S) -> bool:
        c = self._claims_table().c
        with self._errors(), self.engine.begin() as conn:
            return conn.execute(claim_table.update().where(c.task_key == task_key).where(c.worker_id == worker_id)
                                .values(expires_at=self._now() + lease_s)).rowcount == 1

    def release(self, task_key: str, worker_id: str) -> None:
        """Often called on the way out of Ctrl-C, when a connection of this very process may have been cut off
        mid-transaction, still holding SQLite's write lock: wait at most RELEASE_WAIT_S for it, not the 60 s of
        other writes (the claim expires anyway, and a gone worker's claims are taken over at once)."""
        c = self._claims_table().c
        sqlite = self.engine.dialect.name == "sqlite"
        with self._errors(), self.engine.connect() as conn:  # commit-as-you-go: the commit waits under the short wait
            if sqlite:  # the commit is where SQLite waits for the readers' locks to end
                conn.exec_driver_sql(f"PRAGMA busy_timeout={int(RELEASE_WAIT_S * 1000)}")
            try:
                conn.execute(claim_table.delete().where(c.task_key == task_key).where(c.worker_id == worker_id))
                conn.commit()
            except BaseException:
                conn.rollback()  # a failed commit leaves the transaction open
                raise
            finally:
                if sqlite:  # the pooled connection goes back with its usual wait
                    conn.exec_driver_sql(f"PRAGMA busy_timeout={int(SQLITE_WAIT_S * 1000)}")

    def claims(self) -> list[Claim]:
        c = self._claims_table().c
        with self._errors(), self.engine.connect() as conn:
            rows = conn.execute(sa.select(claim_table).where(c.expires_at >= self._now())).all()
        return [Claim(r.task_key, r.worker_id, r.expires_at, r.n_trials) for r in rows]

    def optuna_storage(self) -> Any:
        if self._storage is None:
            import optuna

            self._storage = _retry_while_another_creates(
                lambda: optuna.storages.RDBStorage(self._engine_url, engine_kwargs=self._engine_kwargs()))
        return self._storage

    def close(self) -> None:
        super().close()
        if self._storage is not None:
            self._storage.remove_session()
            self._storage.engine.dispose()
        self.engine.dispose()


def _retry_while_another_creates(make: Any, attempts: int = 5) -> Any:
    """``make()``, again if it lost a race with another tuner creating the same tables at the same moment (two
    workers started together on a new database: "table already exists", a duplicate schema version row; PostgreSQL
    reports the first as a ProgrammingError, DuplicateTable)."""
    import optuna

    for attempt in range(attempts):
        try:
            return make()
        except (sa.exc.IntegrityError, sa.exc.OperationalError, sa.exc.ProgrammingError,
                optuna.exceptions.StorageInternalError) as err:
            text = str(err).lower()
            if attempt == attempts - 1 or not ("already exists" in text or "unique" in text or "locked" in text):
                raise
            log.info("another process is creating the database's tables; trying again")
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def database_failure(err: BaseException) -> str | None:
    """One line if ``err`` was caused by the database failing (e.g. inside Optuna's storage), else None."""
    import sqlite3

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, sa.exc.OperationalError | sqlite3.OperationalError) or (
                isinstance(err, sa.exc.DatabaseError | sqlite3.DatabaseError) and "malformed" in str(err)):
            return describe_failure(None, err)  # disk full, read-only, I/O error, damaged file
        err = err.__cause__ or err.__context__
    return None


def describe_failure(url: str | None, err: BaseException) -> str:
    """One line for a database that failed in use: what happened and what to do (the data written is safe:
    every batch is one transaction)."""
    if url is None:
        where = "the tuning database"
    else:
        where = url[len("sqlite:///"):] if url.startswith("sqlite:///") else display_name(url)
        where = f"database {where}"
    text = str(getattr(err, "orig", None) or err).splitlines()[0] if str(err) else type(err).__name__
    text = mask_secrets(text)  # a driver's message may quote its connection string
    low = text.lower()
    if "full" in low or "no space" in low:
        return (f"{where}: the disk is full ({text}); what was measured before is saved: free some space "
                "and run the same command again to resume")
    if "readonly" in low or "read-only" in low:
        return (f"{where} became read-only ({text}); what was measured before is saved: make it writable "
                "and run the same command again to resume")
    if "malformed" in low or "not a database" in low:
        return f"{where} is damaged ({text}): restore it from a copy, or use a new --db"
    return f"{where} failed ({text}); what was measured before is saved"


def _read_only_url(path: Path) -> str:
    """A SQLite URI that opens ``path`` read-only (it is never created, written or migrated)."""
    from urllib.parse import quote

    return f"sqlite:///file:{quote(str(path))}?mode=ro&uri=true"


def _task_row(task: TaskRow) -> dict[str, Any]:
    return {"task_key": task.task_key, "name": task.name, "target": task.target, "space_version": task.space_version,
            "workload_json": task.workload_json, "flops": task.flops, "info": json.dumps(task.info),
            "created_at": time.time()}


def _record_rows(records: list[TuningRecord]) -> list[dict[str, Any]]:
    return [{
        "task_key": r.task_key, "target": r.target, "params": json.dumps(r.params),
        "decisions": json.dumps(r.decisions), "trace": json.dumps(r.trace_json), "status": r.status.value,
        "latencies_s": json.dumps(r.latencies_s),
        "latency_s": r.latency_s if r.status is Status.OK and r.latencies_s else None,
        "error": r.error and mask_secrets(r.error),
        "autosched_version": r.autosched_version, "tvm_version": r.tvm_version,
        "space_version": r.space_version, "created_at": r.created_at, "predicted_score": r.predicted_score,
    } for r in records]


def _replace_selections(conn: sa.Connection, selections: list[Selection]) -> None:
    """Each task's choice replaced (inside the caller's transaction)."""
    conn.execute(selection_table.delete().where(selection_table.c.task_key.in_([s.task_key for s in selections])))
    conn.execute(selection_table.insert(), [vars(s) for s in selections])


def _to_record(r: Any) -> TuningRecord:
    return TuningRecord(
        task_key=r["task_key"], target=r["target"], params=json.loads(r["params"]),
        decisions=json.loads(r["decisions"]), trace_json=json.loads(r["trace"]) if r["trace"] else None,
        status=Status(r["status"]), latencies_s=json.loads(r["latencies_s"]), error=r["error"],
        autosched_version=r["autosched_version"], tvm_version=r["tvm_version"], space_version=r["space_version"],
        created_at=r["created_at"], predicted_score=r.get("predicted_score"), record_id=r["id"],
    )
