"""Bulk enqueue on the real server: a chunk of plain jobs is one statement (jobs with
dedupe keys add their locks and the scope check before it, and a taken slot one look for
the insert's own rows after it), and its commit sends one NOTIFY per type, not per job."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from durabl import JobQueue
from durabl.model.bulk import BULK_CHUNK
from durabl.stores.postgres import PostgresJobQueue, bulk
from durabl.stores.postgres.schema import Tables
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres


@pytest.fixture
def store() -> Iterator[PostgresJobQueue]:
    table = postgres_table()
    store = PostgresJobQueue(require_postgres(), table=table, listen_notify=False)
    store.startup()
    yield store
    store.close()
    drop_postgres_tables(table)


def _count_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements this thread sends from now on (what runs inside transactions)."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute
    me = threading.get_ident()

    def counting(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me:
            sent.append(str(query).split()[0])
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    return sent


def test_each_chunk_of_plain_jobs_is_one_statement(
    store: PostgresJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = JobQueue(store)
    sent = _count_statements(monkeypatch)
    ids = queue.enqueue_many([("t", n) for n in range(BULK_CHUNK + 1)])
    assert len(sent) == 2, sent
    assert all(ids) and queue.count_jobs() == BULK_CHUNK + 1


def test_a_chunk_of_keyed_jobs_adds_its_key_locks_and_scope_check(
    store: PostgresJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = JobQueue(store)
    queue.enqueue("t", 0, dedupe_key="k0")
    sent = _count_statements(monkeypatch)
    ids = queue.enqueue_many([("t", n, {"dedupe_key": f"k{n}"}) for n in range(500)])
    assert len(sent) == 4, sent  # the locks, the scope check, the insert, the lost-reply check
    assert ids[0] is None and all(ids[1:])


def test_a_chunk_notifies_once_per_type_at_its_earliest_due_job(store: PostgresJobQueue) -> None:
    queue = JobQueue(store)
    channel = Tables(store.table).channel
    with psycopg.connect(require_postgres(), autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        queue.enqueue_many(
            [("a", n) for n in range(50)]
            + [("b", n, {"delay": 60}) for n in range(20)]
            + [("c", n, {"delay": 30 + n}) for n in range(20)]
        )
        conn.execute("SELECT pg_notify(%s, 'marker')", (channel,))
        payloads: list[str] = []
        for notify in conn.notifies(timeout=5):
            if notify.payload == "marker":
                break
            payloads.append(notify.payload)
    # <ms until due>:<type>, the delay read from this host's clock, the wait from the server's
    waits = {kind: int(ms) for ms, kind in (p.split(":") for p in payloads)}
    assert len(payloads) == 3 and set(waits) == {"a", "b", "c"}
    assert waits["a"] == 0
    assert 29_000 < waits["c"] <= 30_000 and 59_000 < waits["b"] <= 60_000


def test_an_insert_meeting_the_rows_of_its_own_lost_attempt_returns_every_job(
    store: PostgresJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The earlier attempt of the insert committed before its reply was lost: the repeat
    meets every row on its id, and those are the jobs, not taken slots."""
    queue = JobQueue(store)
    queue.enqueue("t", 0, dedupe_key="taken")
    insert_rows = bulk.insert_rows

    def after_a_lost_attempt(tx: Any, statements: Any, rows: list[dict[str, Any]]) -> Any:
        with (
            psycopg.connect(require_postgres()) as other,
            other.cursor(row_factory=dict_row) as cur,
        ):
            insert_rows(cur, statements, rows)  # committed as the block ends
        return insert_rows(tx, statements, rows)

    monkeypatch.setattr(bulk, "insert_rows", after_a_lost_attempt)
    ids = queue.enqueue_many(
        [("t", 1), ("t", 2, {"dedupe_key": "k"}), ("t", 3, {"dedupe_key": "taken"})]
    )
    assert ids[0] is not None and ids[1] is not None and ids[2] is None
    assert queue.count_jobs() == 3


def test_the_bulk_insert_writes_every_column_a_new_job_gives() -> None:
    """One array per column of ``new_job_params``: a column added to the single insert and
    forgotten here would be dropped from every job of a batch (a time limit was)."""
    from durabl.model.options import build_new_job
    from durabl.stores.sql.rows import new_job_params

    columns = new_job_params(build_new_job("t", {}), None)
    assert [name for name, _ in bulk.ROW_COLUMNS] == list(columns)
