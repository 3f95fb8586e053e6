"""Tuning databases."""

from __future__ import annotations

from autosched.db.base import Database, TaskRow
from autosched.db.memory import MemoryDatabase
from autosched.db.sql import SQLDatabase


def open_database(path_or_url: str | Database, create: bool = True) -> Database:
    """A path or SQLAlchemy URL ("sqlite:///x.db", "postgresql://..."), ":memory:", or a Database instance."""
    if isinstance(path_or_url, Database):
        return path_or_url
    if path_or_url == ":memory:":
        return MemoryDatabase()
    return SQLDatabase(path_or_url, create=create)


__all__ = ["Database", "MemoryDatabase", "SQLDatabase", "TaskRow", "open_database"]
