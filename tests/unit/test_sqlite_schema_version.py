"""A corrupt schema_version in a SQLite file is refused with SchemaError, and nothing is
written to the file."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import durabl
from durabl import DurablError, JobQueue, SchemaError, SchemaTooNewError, SqliteJobQueue
from durabl.stores.sqlite import schema


def make_file(path: Path) -> None:
    backend = SqliteJobQueue(path)
    JobQueue(backend).enqueue("t", {"n": 1})
    backend.close()


def set_version(path: Path, value: Any) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE durabl_meta SET value = ? WHERE key = 'schema_version'", (value,))


def contents(path: Path) -> tuple[Any, int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        version = conn.execute(
            "SELECT value FROM durabl_meta WHERE key = 'schema_version'"
        ).fetchone()[0]
        return version, conn.execute("SELECT count(*) FROM durabl_jobs").fetchone()[0]


@pytest.mark.parametrize("value", ["abc", "", "  ", "1.5", "-1", "+1", "2x", None, 1.5])
def test_a_corrupt_schema_version_is_a_schema_error(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "jobs.sqlite3"
    make_file(path)
    set_version(path, value)
    before = contents(path)
    backend = SqliteJobQueue(path)
    try:
        with pytest.raises(SchemaError, match="corrupt durabl schema_version") as info:
            backend.startup()
        assert str(path) in str(info.value) and repr(value) in str(info.value)
        with pytest.raises(SchemaError):
            JobQueue(backend).enqueue("t", {"n": 2})  # every operation starts up first
    finally:
        backend.close()
    assert contents(path) == before


def test_a_schema_version_with_surrounding_spaces_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    make_file(path)
    set_version(path, f" {schema.latest_version()} ")
    backend = SqliteJobQueue(path)
    try:
        assert JobQueue(backend).count_jobs() == 1
    finally:
        backend.close()


def test_schema_errors_are_durabl_errors_importable_from_durabl() -> None:
    assert issubclass(SchemaError, DurablError)
    assert issubclass(SchemaTooNewError, SchemaError)
    assert SchemaTooNewError is durabl.SchemaTooNewError
    assert {"SchemaError", "SchemaTooNewError"} <= set(durabl.__all__)
