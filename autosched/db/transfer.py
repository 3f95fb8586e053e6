"""JSON-lines export/import of a database's tasks and records, for shipping tuning results."""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from pathlib import Path

from autosched.db.base import SCHEMA_VERSION, Database, TaskRow
from autosched.errors import UserInputError
from autosched.records import TuningRecord, schedule_key

FORMAT = "autosched-export"


def _open(path: Path, mode: str):
    """Plain or gzip-compressed (``.gz``) text."""
    return gzip.open(path, mode + "t") if path.suffix == ".gz" else open(path, mode)


def export_jsonl(db: Database, path: Path) -> tuple[int, int]:
    tasks, records = db.tasks(), db.records()
    try:
        with _open(path, "w") as f:
            f.write(json.dumps({"format": FORMAT, "schema_version": SCHEMA_VERSION}) + "\n")
            for t in tasks:
                f.write(json.dumps({"task": asdict(t)}) + "\n")
            for r in records:
                f.write(json.dumps({"record": r.to_json()}) + "\n")
    except OSError as err:
        raise UserInputError(f"cannot write {path} ({err.strerror}): pick another -o path") from err
    return len(tasks), len(records)


def read_jsonl(path: Path) -> tuple[list[TaskRow], list[TuningRecord]]:
    try:
        with _open(path, "r") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as err:
        raise UserInputError(f"cannot read {path}: {err}") from err
    try:
        header = json.loads(lines[0]) if lines else {}
        if header.get("format") != FORMAT:
            raise ValueError("missing header")
        if header.get("schema_version") != SCHEMA_VERSION:
            raise UserInputError(f"{path} has schema version {header.get('schema_version')}, "
                                 f"this autosched reads {SCHEMA_VERSION}")
        tasks, records = [], []
        for line in lines[1:]:
            item = json.loads(line)
            if "task" in item:
                tasks.append(TaskRow(**item["task"]))
            else:
                records.append(TuningRecord.from_json(item["record"]))
    except (ValueError, KeyError, TypeError) as err:
        raise UserInputError(f"{path} is not an autosched export (autosched export -o FILE makes one): {err}") from err
    known = {t.task_key for t in tasks}
    orphans = {r.task_key for r in records} - known
    if orphans:
        raise UserInputError(f"{path} has records of tasks it does not contain: {sorted(orphans)[:3]}")
    return tasks, records


def import_jsonl(db: Database, tasks: list[TaskRow], records: list[TuningRecord]) -> tuple[int, int]:
    existing_tasks = {t.task_key for t in db.tasks()}
    for t in tasks:
        db.commit_task(t)
    have = {(r.task_key, schedule_key(r.decisions), r.created_at) for r in db.records()}
    new = [r for r in records if (r.task_key, schedule_key(r.decisions), r.created_at) not in have]
    db.commit(new)
    return len({t.task_key for t in tasks} - existing_tasks), len(new)


def open_export(path: str, create: bool) -> Database:
    """An export as a read-only in-memory database (``compile``/``run``/``show`` straight from a shipped log)."""
    from autosched.db.memory import MemoryDatabase

    if create:
        raise UserInputError(f"{path} is a JSON-lines export, which is read-only: tune into a database "
                             f"(--db NAME.db); autosched import {path} --db NAME.db copies it into one")
    if not Path(path).exists():
        raise UserInputError(f"{path} does not exist: autosched export --db DB -o {path} writes one")
    db = MemoryDatabase()
    import_jsonl(db, *read_jsonl(Path(path)))
    return db
