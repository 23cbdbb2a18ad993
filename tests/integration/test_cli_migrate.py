"""``durabl migrate``: the schema created or upgraded out of band, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from durabl.cli import main
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres

ROOT = Path(__file__).resolve().parents[2]


def with_table(url: str, table: str, password: str | None = None) -> str:
    if password is not None:  # the server trusts us: a password is accepted and ignored
        scheme, rest = url.split("://", 1)
        user, at, host = rest.partition("@")
        url = f"{scheme}://{user}:{password}@{host}" if at else url
    return f"{url}{'&' if '?' in url else '?'}table={table}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
        return
    table = postgres_table()
    yield with_table(require_postgres(), table, password="s3cret")
    drop_postgres_tables(table)


def migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["migrate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_then_migrate_then_nothing_left_to_do(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = migrate(capsys, "--url", store_url, "--check")
    assert (code, err) == (1, "")
    assert "migration pending: schema version 0" in out and out.count("\n") == 1

    code, out, err = migrate(capsys, "--url", store_url)
    assert (code, err) == (0, "")
    assert "migrated schema version 0 -> " in out and out.count("\n") == 1
    assert "s3cret" not in out

    code, out, _ = migrate(capsys, "--url", store_url)
    assert code == 0 and "up to date at schema version" in out and "nothing to do" in out

    code, out, _ = migrate(capsys, "--url", store_url, "--check")
    assert code == 0 and "up to date" in out


def test_url_defaults_to_durabl_url(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABL_URL", store_url)
    code, out, _ = migrate(capsys)
    assert code == 0 and "migrated" in out


def test_without_a_url_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DURABL_URL", raising=False)
    code, _, err = migrate(capsys)
    assert code == 2 and "--url" in err


def test_a_postgres_schema_newer_than_this_release_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import psycopg

    server, table = require_postgres(), postgres_table()
    url = with_table(server, table)
    try:
        assert migrate(capsys, "--url", url)[0] == 0
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"UPDATE {table}_meta SET value = '99'")  # type: ignore[arg-type]
        code, out, err = migrate(capsys, "--url", url)
        assert (code, out) == (1, "")
        assert err.startswith("durabl migrate: error: ") and "newer durabl" in err
        assert err.count("\n") == 1
    finally:
        drop_postgres_tables(table)


def run_durabl_quickly(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m durabl ARGS`` in a process of its own, which must end within 10 s."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "durabl", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert time.monotonic() - began < 10
    return done


def test_an_unreachable_server_fails_with_one_line_within_10_seconds() -> None:
    done = run_durabl_quickly("migrate", "--url", "postgresql://postgres:s3cret@127.0.0.1:1/test")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("durabl migrate: error: PostgreSQL unavailable")
    assert done.stderr.count("\n") == 1 and "s3cret" not in done.stderr


def test_mongodb_check_asks_the_store_for_its_indexes(capsys: pytest.CaptureFixture[str]) -> None:
    url = "mongomock:///migrate_check"
    code, out, err = migrate(capsys, "--url", url, "--check")
    assert (code, err) == (1, "")
    assert "setup pending: missing durabl_claim" in out and "run `durabl migrate`" in out

    code, out, _ = migrate(capsys, "--url", url)
    assert code == 0 and "indexes ensured" in out

    code, out, _ = migrate(capsys, "--url", url, "--check")
    assert code == 0 and "nothing pending" in out


def test_mongodb_check_on_an_unreachable_server_fails_within_10_seconds() -> None:
    done = run_durabl_quickly("migrate", "--check", "--url", "mongodb://127.0.0.1:1/x")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("durabl migrate: error: ")
    assert "MongoDB unavailable during pending_setup: 127.0.0.1:1" in done.stderr
    assert done.stderr.count("\n") == 1
