"""The PostgreSQL schema: versioned migrations, a startup race between many threads and
processes, and tables newer than the code."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from durabl import SchemaTooNewError
from durabl.stores.postgres import PostgresJobQueue, schema
from tests.conftest import drop_postgres_tables
from tests.contract.support import enqueue_id

ROOT = Path(__file__).resolve().parents[2]


def fresh_table() -> str:
    return f"durabl_t_{uuid.uuid4().hex[:10]}"


def version_of(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f'SELECT value FROM "{table}_meta"').fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])


def tables_holding_a_job(url: str) -> tuple[str, str]:
    """Fresh tables at today's version holding one job: (table name, the job's id)."""
    table = fresh_table()
    store = PostgresJobQueue(url, table=table)
    try:
        return table, enqueue_id(store, data={"n": 1})
    finally:
        store.close()


def add_column(t: schema.Tables) -> list[str]:
    """A migration of a newer release."""
    return [f"ALTER TABLE {t.qualified()} ADD COLUMN extra text"]


def test_startup_creates_the_tables_at_the_latest_version(pg_url: str) -> None:
    table = fresh_table()
    store = PostgresJobQueue(pg_url, table=table)
    try:
        store.startup()
        assert version_of(pg_url, table) == schema.latest_version()
        assert store.count_jobs() == 0
    finally:
        store.close()
        drop_postgres_tables(table)


def test_a_new_migration_upgrades_tables_that_hold_jobs(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, job_id = tables_holding_a_job(pg_url)
    try:
        latest = schema.latest_version()

        monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (latest + 1, add_column)])
        new = PostgresJobQueue(pg_url, table=table)
        new.startup()
        new.startup()
        assert version_of(pg_url, table) == latest + 1
        job = new.get_job(job_id)
        assert job is not None and job.data == {"n": 1}
        with psycopg.connect(pg_url) as conn:
            conn.execute(f'SELECT extra FROM "{table}"')  # type: ignore[arg-type]
        new.close()
    finally:
        drop_postgres_tables(table)


def test_an_upgrade_that_fails_part_way_leaves_the_tables_as_they_were(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, job_id = tables_holding_a_job(pg_url)
    try:
        latest = schema.latest_version()

        upgrades = [(latest + 1, add_column), (latest + 2, add_column)]  # the second fails
        monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, *upgrades])
        new = PostgresJobQueue(pg_url, table=table)
        with pytest.raises(Exception, match="extra"):
            new.startup()
        new.close()
        # Neither upgrade is kept: the version and the columns are the old ones, and the
        # old code goes on working on them.
        assert version_of(pg_url, table) == latest
        with psycopg.connect(pg_url) as conn:
            columns = conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s",
                (table,),
            ).fetchall()
        assert ("extra",) not in columns
        monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:latest])
        again = PostgresJobQueue(pg_url, table=table)
        job = again.get_job(job_id)
        assert job is not None and job.data == {"n": 1}
        again.close()
    finally:
        drop_postgres_tables(table)


def test_tables_from_a_newer_durabl_raise_schema_too_new(pg_url: str) -> None:
    table = fresh_table()
    store = PostgresJobQueue(pg_url, table=table)
    try:
        store.startup()
        store.close()
        with psycopg.connect(pg_url) as conn:
            conn.execute(f"UPDATE \"{table}_meta\" SET value = '999'")  # type: ignore[arg-type]
        newer = PostgresJobQueue(pg_url, table=table)
        with pytest.raises(SchemaTooNewError, match="999"):
            newer.startup()
        with pytest.raises(SchemaTooNewError):
            newer.count_jobs()  # every operation starts up first
        newer.close()
    finally:
        drop_postgres_tables(table)


def test_many_threads_starting_up_at_once_create_the_schema_once(pg_url: str) -> None:
    table = fresh_table()
    stores = [PostgresJobQueue(pg_url, table=table) for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def start(store: PostgresJobQueue) -> None:
        barrier.wait()
        try:
            store.startup()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert version_of(pg_url, table) == schema.latest_version()
        enqueue_id(stores[0], dedupe_key="k")
        assert stores[1].count_jobs() == 1
    finally:
        for s in stores:
            s.close()
        drop_postgres_tables(table)


def test_many_processes_starting_up_at_once_create_the_schema_once(pg_url: str) -> None:
    table = fresh_table()
    code = (
        "import sys\nfrom durabl.stores.postgres import PostgresJobQueue\n"
        "s = PostgresJobQueue(sys.argv[1], table=sys.argv[2])\ns.startup()\ns.close()\n"
    )
    try:
        procs = [
            subprocess.Popen([sys.executable, "-c", code, pg_url, table], cwd=ROOT)
            for _ in range(4)
        ]
        assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
        assert version_of(pg_url, table) == schema.latest_version()
    finally:
        drop_postgres_tables(table)


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", "x" * 41, "a.b.c", "a;drop"])
def test_a_bad_table_name_is_a_value_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="table must be"):
        PostgresJobQueue("postgresql://u@h/db", table=bad)


def test_a_schema_qualified_table_works(pg_url: str) -> None:
    name = f"durabl_s_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')  # type: ignore[arg-type]
    store = PostgresJobQueue(pg_url, table=f"{name}.jobs")
    try:
        job_id = enqueue_id(store)
        assert store.claim("t")[0].id == job_id
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')  # type: ignore[arg-type]
