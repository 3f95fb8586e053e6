"""JSON-lines export/import of a database's tasks and records, for shipping tuning results."""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import asdict
from pathlib import Path

from autosched.bounded import MiB, read_lines
from autosched.db.base import SCHEMA_VERSION, Database, Selection, TaskRow
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
            for chosen in _selections(db, tasks, records):
                f.write(json.dumps({"selection": chosen}) + "\n")
    except OSError as err:
        raise UserInputError(f"cannot write {path} ({err.strerror}): pick another -o path") from err
    return len(tasks), len(records)


def _selections(db: Database, tasks: list[TaskRow], records: list[TuningRecord]) -> list[dict]:
    """The tasks' in-model choices (``Database.selection``), each naming its record by its task, creation time and
    decisions (record ids are the database's own)."""
    by_id = {r.record_id: r for r in records}
    out = []
    for t in tasks:
        chosen = db.selection(t.task_key)
        if chosen is not None and (rec := by_id.get(chosen.record_id)) is not None:
            out.append({**asdict(chosen), "record_id": None, "record_created_at": rec.created_at,
                        "record_decisions": rec.decisions})
    return out


def read_jsonl(path: Path) -> tuple[list[TaskRow], list[TuningRecord], list[dict]]:
    try:
        with _open(path, "r") as f:
            lines = _bounded_lines(f, path)
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as err:
        raise UserInputError(f"cannot read {path}: {err}") from err
    try:
        header = json.loads(lines[0]) if lines else {}
        if header.get("format") != FORMAT:
            raise ValueError("missing header")
        if header.get("schema_version") != SCHEMA_VERSION:
            raise UserInputError(f"{path} has schema version {header.get('schema_version')}, "
                                 f"this autosched reads {SCHEMA_VERSION}")
        tasks, records, selections = [], [], []
        for line in lines[1:]:
            item = json.loads(line)
            if "task" in item:
                tasks.append(TaskRow(**item["task"]))
            elif "selection" in item:
                selections.append(_checked_selection(item["selection"]))
            else:
                records.append(TuningRecord.from_json(item["record"]))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        raise UserInputError(f"{path} is not an autosched export (autosched export -o FILE makes one): {err}") from err
    known = {t.task_key for t in tasks}
    orphans = {r.task_key for r in records} - known
    if orphans:
        raise UserInputError(f"{path} has records of tasks it does not contain: {sorted(orphans)[:3]}")
    return tasks, records, selections


LINE_MAX_CHARS = 64 * MiB  # one task or record; the largest autosched writes are a few KiB


def _bounded_lines(f, path: Path) -> list[str]:
    """The lines of the open export ``f``, read one at a time, each refused past ``LINE_MAX_CHARS``."""
    return list(read_lines(f, LINE_MAX_CHARS, str(path), f"autosched export -o {path.name} writes one"))


_SELECTION_FIELDS = {"task_key": str, "target": str, "model": str, "model_s": float, "created_at": float,
                     "record_created_at": float, "record_decisions": list}


def _checked_selection(item: dict) -> dict:
    """An export's selection line with every field it needs, of its type (else ValueError)."""
    for name, kind in _SELECTION_FIELDS.items():
        value = item.get(name)
        if not isinstance(value, kind) and not (kind is float and isinstance(value, int)):
            raise ValueError(f"selection field {name!r} is {value!r}")
    if item.get("in_model_s") is not None and not isinstance(item["in_model_s"], int | float):
        raise ValueError(f"selection field 'in_model_s' is {item['in_model_s']!r}")
    return dict(item)


def import_jsonl(db: Database, tasks: list[TaskRow], records: list[TuningRecord],
                 selections: list[dict] = ()) -> tuple[int, int]:
    existing_tasks = {t.task_key for t in db.tasks()}
    for t in tasks:
        db.commit_task(t)
    have = {(r.task_key, schedule_key(r.decisions), r.created_at) for r in db.records()}
    new = [r for r in records if (r.task_key, schedule_key(r.decisions), r.created_at) not in have]
    db.commit(new)
    _import_selections(db, selections)
    return len({t.task_key for t in tasks} - existing_tasks), len(new)


def _import_selections(db: Database, selections: list[dict]) -> None:
    """The export's in-model choices, each pointed at the record it names in ``db``."""
    chosen = []
    for sel in selections:
        named = (sel["record_created_at"], schedule_key(sel["record_decisions"]))
        rec = next((r for r in db.records(sel["task_key"]) if (r.created_at, schedule_key(r.decisions)) == named),
                   None)
        if rec is not None:
            fields = {k: sel[k] for k in ("task_key", "target", "model", "in_model_s", "model_s", "created_at")}
            chosen.append(Selection(**fields, record_id=rec.record_id))
    if chosen:
        db.select(chosen)


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
