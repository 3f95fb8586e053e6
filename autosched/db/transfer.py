"""JSON-lines export/import of a database's tasks and records, for shipping tuning results."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import math
import os
import tempfile
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autosched import bounded
from autosched.bounded import CappedReader, MiB, read_lines
from autosched.db.base import SCHEMA_VERSION, Database, TaskRow
from autosched.errors import UserInputError
from autosched.records import TuningRecord, schedule_key, short_repr

FORMAT = "autosched-export"
EXPORT_VERSION = 2  # v2: a header "export_version" and a trailer line (line count, sha256); v1 (no version): neither


def _open(path: Path) -> io.TextIOWrapper:
    """Plain or gzip-compressed (``.gz``) text to read, at most ``bounded.EXPORT_MAX_BYTES`` of it (decompressed: a
    small gzip bomb is refused in one line once that much came out of it)."""
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    capped = CappedReader(raw, bounded.EXPORT_MAX_BYTES, str(path), f"autosched export -o {path.name} writes one")
    return io.TextIOWrapper(io.BufferedReader(capped), encoding="utf-8")


def export_jsonl(db: Database, path: Path) -> tuple[int, int]:
    """Write the database's tasks, records and selections to ``path`` (gzip if it ends in ``.gz``): into a temporary
    file beside it, fsynced and renamed over it, so the target is the old file or the whole new one; the last line
    (the trailer) counts the lines before it and holds their sha256, which import checks."""
    tasks, records = db.tasks(), db.records()
    lines = [{"format": FORMAT, "schema_version": SCHEMA_VERSION, "export_version": EXPORT_VERSION}]
    lines += [{"task": asdict(t)} for t in tasks]
    lines += [{"record": r.to_json()} for r in records]
    lines += [{"selection": chosen} for chosen in _selections(db, tasks, records)]
    try:
        _write_atomically(path, [json.dumps(line) + "\n" for line in lines])
    except OSError as err:
        raise UserInputError(f"cannot write {path} ({err.strerror or err}): pick another -o path") from err
    return len(tasks), len(records)


def _write_atomically(path: Path, lines: list[str]) -> None:
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            sink = gzip.GzipFile(filename=path.name.removesuffix(".gz"), mode="wb", fileobj=raw) \
                if path.suffix == ".gz" else raw
            for line in lines:
                data = line.encode()
                digest.update(data)
                sink.write(data)
            sink.write((json.dumps({"trailer": {"lines": len(lines), "sha256": digest.hexdigest()}}) + "\n").encode())
            if sink is not raw:
                sink.close()  # the gzip trailer; ``raw`` stays open
            raw.flush()
            os.fsync(raw.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it (mkstemp's are 0600)
        os.replace(tmp, path)
    except BaseException:  # a failed or interrupted export leaves the old file, and no temporary one
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash once the folder is synced
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


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
    """An export's tasks, records and selections, the whole file checked first (a bad line, a truncated file, a
    trailer that does not match: UserInputError naming the line)."""
    try:
        with _open(path) as f:
            lines = _bounded_lines(f, path)
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise UserInputError(f"cannot read {path} (truncated or damaged?): {err}") from err
    not_export = f"{path} is not an autosched export (autosched export -o FILE makes one)"
    try:
        header = json.loads(lines[0]) if lines else None
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise UserInputError(f"{not_export}: line 1 is not its header")
    if header.get("schema_version") != SCHEMA_VERSION:
        raise UserInputError(f"{path} has schema version {header.get('schema_version')}, "
                             f"this autosched reads {SCHEMA_VERSION}")
    version = header.get("export_version", 1)
    if version not in (1, EXPORT_VERSION):
        raise UserInputError(f"{path} has export version {version!r}, this autosched reads 1 to {EXPORT_VERSION}: "
                             "import it with a newer autosched")
    body = _checked_trailer(path, lines, version)
    tasks, records, selections = [], [], []
    for number, line in enumerate(body[1:], start=2):
        try:
            item = json.loads(line)
            if not isinstance(item, dict) or len(item) != 1:
                raise ValueError("not one of {\"task\": ...}, {\"record\": ...}, {\"selection\": ...}")
            if "task" in item:
                tasks.append(_checked_task(item["task"]))
            elif "selection" in item:
                selections.append(_checked_selection(item["selection"]))
            elif "record" in item:
                records.append(TuningRecord.from_json(item["record"]))
            else:
                raise ValueError(f"unknown line kind {next(iter(item))!r}")
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, UserInputError) as err:
            raise UserInputError(f"{path} line {number}: {err}; fix or remove that line, then import again") from err
    known = {t.task_key for t in tasks}
    orphans = {r.task_key for r in records} - known
    if orphans:
        raise UserInputError(f"{path} has records of tasks it does not contain: {sorted(orphans)[:3]}")
    return tasks, records, selections


LINE_MAX_CHARS = 64 * MiB  # one task or record; the largest autosched writes are a few KiB


def _bounded_lines(f, path: Path) -> list[str]:
    """The lines of the open export ``f``, read one at a time, each refused past ``LINE_MAX_CHARS``."""
    return list(read_lines(f, LINE_MAX_CHARS, str(path), f"autosched export -o {path.name} writes one"))


def _checked_trailer(path: Path, lines: list[str], version: int) -> list[str]:
    """The lines before the trailer, checked against it. A v2 export must end in one (else it was cut short); a v1
    export (older autosched) has none."""
    try:
        last = json.loads(lines[-1]) if len(lines) > 1 else None
    except (ValueError, RecursionError):
        last = None
    trailer = last.get("trailer") if isinstance(last, dict) and len(last) == 1 else None
    if trailer is None:
        if version >= 2:
            raise UserInputError(f"{path} is cut short (it has no trailer line): export it again")
        return lines
    body = lines[:-1]
    digest = hashlib.sha256("".join(line + "\n" for line in body).encode()).hexdigest()
    if not isinstance(trailer, dict) or trailer.get("lines") != len(body) or trailer.get("sha256") != digest:
        raise UserInputError(f"{path} does not match its trailer (cut short, or edited): export it again")
    return body


_TASK_FIELDS = {"task_key": str, "name": str, "target": str, "space_version": int, "workload_json": str,
                "flops": float, "info": dict}


def _checked_task(item: Any) -> TaskRow:
    """An export's task line with every field of its type, its target and workload JSON text (else ValueError)."""
    if not isinstance(item, dict):
        raise ValueError(f"a task is an object, not {type(item).__name__}")
    if set(item) != _TASK_FIELDS.keys():
        raise ValueError(f"task fields {sorted(set(item) ^ _TASK_FIELDS.keys())} missing or unknown")
    for name, kind in _TASK_FIELDS.items():
        value = item[name]
        if kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise ValueError(f"task field {name!r} is {short_repr(value)}: must be a "
                             f"{'finite, non-negative number' if kind is float else kind.__name__}")
    for name in ("target", "workload_json"):
        try:
            json.loads(item[name])
        except (ValueError, RecursionError):
            raise ValueError(f"task field {name!r} is not JSON text") from None
    if not item["task_key"]:
        raise ValueError("task field 'task_key' is empty")
    return TaskRow(**item)


_SELECTION_FIELDS = {"task_key": str, "target": str, "model": str, "model_s": float, "created_at": float,
                     "record_created_at": float, "record_decisions": list}


def _checked_selection(item: dict) -> dict:
    """An export's selection line with every field it needs, of its type (else ValueError)."""
    if not isinstance(item, dict):
        raise ValueError(f"a selection is an object, not {short_repr(item)}")
    for name, kind in _SELECTION_FIELDS.items():
        value = item.get(name)
        if not isinstance(value, kind) and not (kind is float and isinstance(value, int)):
            raise ValueError(f"selection field {name!r} is {value!r}")
    if item.get("in_model_s") is not None and not isinstance(item["in_model_s"], int | float):
        raise ValueError(f"selection field 'in_model_s' is {item['in_model_s']!r}")
    return dict(item)


def import_jsonl(db: Database, tasks: list[TaskRow], records: list[TuningRecord],
                 selections: list[dict] = ()) -> tuple[int, int]:
    """Add an export's (``read_jsonl``) tasks, records and selections that ``db`` lacks, in one transaction."""
    existing_tasks = {t.task_key for t in db.tasks()}
    have = {(r.task_key, schedule_key(r.decisions), r.created_at) for r in db.records()}
    new = [r for r in records if (r.task_key, schedule_key(r.decisions), r.created_at) not in have]
    db.commit_all([t for t in tasks if t.task_key not in existing_tasks], new, list(selections))
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
