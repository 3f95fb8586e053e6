"""Tuning databases."""

from __future__ import annotations

from autosched.db.base import LEASE_S, Claim, Database, Selection, TaskRow, display_name
from autosched.db.leases import Leases
from autosched.db.memory import MemoryDatabase
from autosched.db.sql import SQLDatabase

EXPORT_SUFFIXES = (".jsonl", ".jsonl.gz")


def open_database(path_or_url: str | Database, create: bool = True, read_only: bool = False) -> Database:
    """A path or SQLAlchemy URL ("sqlite:///x.db", "postgresql://..."), ":memory:", a JSON-lines export
    (``.jsonl[.gz]``, read-only: compile, run, show, report), or a Database instance. ``read_only`` (show, report,
    export): a SQLite file is opened read-only and never created or migrated."""
    if isinstance(path_or_url, Database):
        return path_or_url
    if path_or_url == ":memory:":
        return MemoryDatabase()
    if path_or_url.endswith(EXPORT_SUFFIXES):  # a shipped JSON-lines export, read into memory
        from autosched.db.transfer import open_export

        return open_export(path_or_url, create and not read_only)
    return SQLDatabase(path_or_url, create=create, read_only=read_only)


__all__ = ["LEASE_S", "Claim", "Database", "Leases", "MemoryDatabase", "SQLDatabase", "Selection", "TaskRow",
           "display_name", "open_database"]
