"""Read-only commands (``health``, ``stats``, ``jobs``, ``show``, ``workers``, ``schedules``,
``events``, ``migrate --check``) never create, set up or migrate a store: a mistyped URL is an error
that names what is missing, not an empty and healthy queue."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pytest

from durabl import JobQueue, backend_from_url
from durabl.cli import main
from durabl.model.exceptions import StoreNotFoundError
from durabl.model.migrations import VERSION_KEY
from durabl.stores.sqlite import SqliteJobQueue
from durabl.stores.sqlite.schema import META_TABLE
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres

READ_ONLY = (
    ["health"],
    ["stats"],
    ["jobs"],
    ["show", "some-id"],
    ["workers"],
    ["schedules"],
    ["events"],
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", READ_ONLY, ids=lambda argv: argv[0])
def test_a_missing_sqlite_file_is_an_error_naming_its_absolute_path(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative path, as the user typed it
    code, out, err = run(capsys, *argv, "--url", "sqlite:///jobs.db")
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1
    assert f"{tmp_path / 'jobs.db'} does not exist" in err
    assert list(tmp_path.iterdir()) == []  # no database, no -wal or -shm file


def test_health_json_reports_the_missing_store_as_unhealthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "health", "--json", "--url", f"sqlite:///{tmp_path}/jobs.db")
    report = json.loads(out)
    assert code == 1 and report["healthy"] is False
    assert f"{tmp_path}/jobs.db does not exist" in report["reason"]
    assert list(tmp_path.iterdir()) == []


def test_a_missing_directory_is_named_as_the_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "stats", "--url", f"sqlite:///{tmp_path}/nowhere/jobs.db")
    assert code == 1 and f"{tmp_path}/nowhere/jobs.db does not exist" in err
    assert list(tmp_path.iterdir()) == []


def test_migrate_check_reports_the_missing_file_as_pending_without_creating_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "migrate", "--check", "--url", "sqlite:///jobs.db")
    assert (code, err) == (1, "")
    assert "migration pending: schema version 0" in out
    assert f"{tmp_path / 'jobs.db'} does not exist" in out
    assert list(tmp_path.iterdir()) == []
    assert run(capsys, "migrate", "--url", "sqlite:///jobs.db")[0] == 0  # this one creates
    assert (tmp_path / "jobs.db").exists()


def test_a_file_durabl_never_set_up_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    code, _, err = run(capsys, "stats", "--url", f"sqlite:///{other}")
    assert code == 1 and "holds no durabl store" in err and "durabl migrate" in err
    with sqlite3.connect(other) as conn:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master")]
    conn.close()
    assert tables == ["notes"]


def test_a_store_an_older_release_wrote_is_not_migrated_by_a_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    queue = JobQueue(backend_from_url(url))
    queue.enqueue("a", {})
    latest = queue.backend.schema_version()
    assert latest is not None
    queue.backend.close()
    older = str(latest.latest - 1)
    with sqlite3.connect(tmp_path / "jobs.db") as conn:
        conn.execute(f"UPDATE {META_TABLE} SET value = ? WHERE key = ?", (older, VERSION_KEY))
    conn.close()
    code, _, err = run(capsys, "jobs", "--url", url)
    assert code == 1
    assert f"schema version {older} is older than this release's {latest.latest}" in err
    assert "durabl migrate" in err
    with sqlite3.connect(tmp_path / "jobs.db") as conn:
        stored = conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = ?", (VERSION_KEY,))
        assert stored.fetchone()[0] == older
    conn.close()


def test_read_only_commands_on_an_existing_store_still_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    queue = JobQueue(backend_from_url(url))
    job_id = queue.enqueue("a", {"n": 1})
    queue.backend.close()
    assert job_id is not None
    for argv in READ_ONLY:
        argv = ["show", job_id] if argv[0] == "show" else argv
        code, _, err = run(capsys, *argv, "--url", url)
        assert code == 0, (argv, err)


def test_postgres_tables_are_not_created_by_a_read(capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg

    server, table = require_postgres(), postgres_table()
    url = f"{server}{'&' if '?' in server else '?'}table={table}"
    try:
        for argv in READ_ONLY:
            code, _, err = run(capsys, *argv, "--url", url)
            assert code == 1 and "holds no durabl store" in err, (argv, err)
        with psycopg.connect(server, autocommit=True) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE tablename LIKE %s", (f"{table}%",)
            ).fetchone()
        assert found == (0,)
    finally:
        drop_postgres_tables(table)


def test_mongodb_indexes_are_not_created_by_a_read(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mongomock")
    url = f"mongomock:///typo_{uuid.uuid4().hex[:12]}"
    code, _, err = run(capsys, "stats", "--url", url)
    assert code == 1 and "durabl_claim" in err and "are missing" in err
    backend = backend_from_url(url)
    try:
        assert "durabl_claim" in backend.pending_setup()
    finally:
        backend.close()


def test_a_sqlite_store_opened_without_create_never_creates_its_file(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    missing = backend_from_url(f"sqlite:///{path}", create=False)
    with pytest.raises(FileNotFoundError) as raised:  # a StoreNotFoundError
        missing.schema_version()
    assert isinstance(raised.value, StoreNotFoundError) and raised.value.filename == str(path)
    missing.close()
    assert list(tmp_path.iterdir()) == []
    creating = SqliteJobQueue(path)
    JobQueue(creating).enqueue("a", {})
    creating.close()
    existing = JobQueue(SqliteJobQueue(path, create=False))
    try:
        assert existing.get_stats().pending == 1
    finally:
        existing.backend.close()
