"""The SQLite backend: a durable, multi-process job store on the standard library's sqlite3."""

from __future__ import annotations

from durabl.stores.sqlite.backend import SqliteJobQueue

__all__ = ["SqliteJobQueue"]
