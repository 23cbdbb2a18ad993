"""Transactional enqueue on the real server: ``queue.enqueue(..., connection=conn)`` inserts
inside the caller's transaction. The job exists if and only if the caller commits, no other
connection can claim it before, its NOTIFY arrives at the commit, and a dedupe conflict or a
scope error inside leaves the caller's transaction usable."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durabl import DedupeScopeConflictError, JobQueue
from durabl.stores.postgres import PostgresJobQueue
from durabl.stores.postgres.listener import parse_payload
from durabl.stores.postgres.schema import Tables
from durabl.testing import wait_until
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres


@pytest.fixture
def server() -> str:
    return require_postgres()


@pytest.fixture
def table() -> Iterator[str]:
    name = postgres_table()
    yield name
    drop_postgres_tables(name)


@pytest.fixture
def store(server: str, table: str) -> Iterator[PostgresJobQueue]:
    backend = PostgresJobQueue(server, table=table, listen_notify=False)
    backend.startup()
    yield backend
    backend.close()


@pytest.fixture
def queue(store: PostgresJobQueue) -> Iterator[JobQueue]:
    q = JobQueue(store)
    yield q
    q.shutdown(timeout=5)


@pytest.fixture
def conn(server: str) -> Iterator[psycopg.Connection[Any]]:
    """The caller's own connection (psycopg's default: not autocommit)."""
    with psycopg.connect(server) as connection:
        yield connection


@pytest.fixture
def scratch(conn: psycopg.Connection[Any], table: str) -> str:
    """A table of the caller's own, written in the same transaction as the enqueue."""
    name = f"{table}_app"
    conn.execute(f"CREATE TABLE {name} (note text)")  # type: ignore[arg-type]
    conn.commit()
    return name


def notes(server: str, name: str) -> list[str]:
    with psycopg.connect(server) as other:
        return [r[0] for r in other.execute(f"SELECT note FROM {name}")]  # type: ignore[arg-type]


def test_a_committed_enqueue_is_claimable(
    queue: JobQueue, conn: psycopg.Connection[Any], scratch: str, server: str
) -> None:
    conn.execute(f"INSERT INTO {scratch} VALUES ('order 1')")  # type: ignore[arg-type]
    job_id = queue.enqueue("email", {"order": 1}, connection=conn)
    assert job_id is not None
    conn.commit()
    handles = queue.backend.claim("email", limit=5)
    assert [h.id for h in handles] == [job_id]
    assert handles[0].data == {"order": 1}
    assert notes(server, scratch) == ["order 1"]


def test_a_rolled_back_enqueue_leaves_no_job(
    queue: JobQueue, conn: psycopg.Connection[Any], scratch: str, server: str
) -> None:
    conn.execute(f"INSERT INTO {scratch} VALUES ('order 1')")  # type: ignore[arg-type]
    job_id = queue.enqueue("email", {"order": 1}, connection=conn)
    assert job_id is not None
    conn.rollback()
    assert queue.get_job(job_id) is None
    assert queue.count_jobs() == 0
    assert queue.backend.claim("email") == []
    assert notes(server, scratch) == []


def test_no_other_connection_can_claim_the_job_before_the_commit(
    queue: JobQueue, conn: psycopg.Connection[Any]
) -> None:
    job_id = queue.enqueue("email", {}, connection=conn)
    seen: list[Any] = []

    def worker() -> None:  # another thread, on the store's pool
        seen.append(queue.backend.claim("email", limit=5))
        seen.append(queue.get_job(job_id or ""))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert seen == [[], None]
    conn.commit()
    assert [h.id for h in queue.backend.claim("email")] == [job_id]


def test_an_autocommit_connection_outside_a_transaction_commits_at_once(
    queue: JobQueue, server: str
) -> None:
    with psycopg.connect(server, autocommit=True) as auto:
        job_id = queue.enqueue("email", {}, connection=auto)
        assert auto.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert [h.id for h in queue.backend.claim("email")] == [job_id]


def test_a_transaction_block_on_an_autocommit_connection_covers_the_job(
    queue: JobQueue, server: str
) -> None:
    with psycopg.connect(server, autocommit=True) as auto:
        with pytest.raises(RuntimeError), auto.transaction():
            queue.enqueue("email", {"n": 1}, connection=auto)
            raise RuntimeError("the caller's work failed")
        assert queue.count_jobs() == 0
        with auto.transaction():
            kept = queue.enqueue("email", {"n": 2}, connection=auto)
    assert [h.id for h in queue.backend.claim("email", limit=5)] == [kept]


def test_a_taken_dedupe_slot_inside_the_transaction_leaves_it_usable(
    queue: JobQueue, conn: psycopg.Connection[Any], scratch: str, server: str
) -> None:
    first = queue.enqueue("sync", {"v": 1}, dedupe_key="user-1")
    conn.execute(f"INSERT INTO {scratch} VALUES ('before')")  # type: ignore[arg-type]
    assert queue.enqueue("sync", {"v": 2}, dedupe_key="user-1", connection=conn) is None
    conn.execute(f"INSERT INTO {scratch} VALUES ('after')")  # type: ignore[arg-type]
    conn.commit()
    assert notes(server, scratch) == ["before", "after"]
    assert [j.id for j in queue.list_jobs()] == [first]


def test_a_scope_conflict_inside_the_transaction_rolls_back_only_the_enqueue(
    queue: JobQueue, conn: psycopg.Connection[Any], scratch: str, server: str
) -> None:
    first = queue.enqueue("sync", {}, dedupe_key="user-1", dedupe_scope="pending")
    conn.execute(f"INSERT INTO {scratch} VALUES ('kept')")  # type: ignore[arg-type]
    with pytest.raises(DedupeScopeConflictError):
        queue.enqueue("sync", {}, dedupe_key="user-1", connection=conn)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    other = queue.enqueue("sync", {"k": 2}, dedupe_key="user-2", connection=conn)
    conn.commit()
    assert notes(server, scratch) == ["kept"]
    assert sorted(j.id for j in queue.list_jobs()) == sorted([first, other])


def test_coalescing_inside_the_transaction_applies_at_the_commit(
    queue: JobQueue, conn: psycopg.Connection[Any]
) -> None:
    first = queue.enqueue("sync", {"v": 1}, dedupe_key="k")
    assert first is not None
    assert (
        queue.enqueue("sync", {"v": 2}, dedupe_key="k", coalesce="latest", connection=conn) is None
    )
    assert queue.get_job(first).data == {"v": 1}  # type: ignore[union-attr]
    conn.commit()
    assert queue.get_job(first).data == {"v": 2}  # type: ignore[union-attr]


def test_a_debounce_push_inside_a_rolled_back_transaction_leaves_the_job_as_it_was(
    queue: JobQueue, conn: psycopg.Connection[Any]
) -> None:
    first = queue.enqueue("sync", {}, dedupe_key="k", debounce=60)
    assert first is not None
    due = queue.get_job(first).run_at  # type: ignore[union-attr]
    assert queue.enqueue("sync", {}, dedupe_key="k", debounce=3600, connection=conn) is None
    conn.rollback()
    assert queue.get_job(first).run_at == due  # type: ignore[union-attr]
    assert queue.enqueue("sync", {}, dedupe_key="k", debounce=3600, connection=conn) is None
    conn.commit()
    assert queue.get_job(first).run_at > due  # type: ignore[union-attr]


def key_lock_waiters(server: str, table: str) -> int:
    """How many sessions wait for a dedupe-key lock of ``table``'s queue."""
    with psycopg.connect(server) as other:
        row = other.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid::bigint = (%s::bigint & 4294967295)",
            (Tables(table).key_lock_class,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_an_enqueue_of_the_same_key_waits_for_the_callers_commit(
    queue: JobQueue, conn: psycopg.Connection[Any], server: str, table: str
) -> None:
    mine = queue.enqueue("sync", {}, dedupe_key="k", connection=conn)
    results: list[str | None] = []

    def rival() -> None:
        results.append(queue.enqueue("sync", {}, dedupe_key="k"))

    thread = threading.Thread(target=rival)
    thread.start()
    assert wait_until(lambda: key_lock_waiters(server, table) > 0)  # blocked on the key
    assert results == []
    conn.commit()
    thread.join(10)
    assert results == [None]  # the slot was the caller's once it committed
    assert [j.id for j in queue.list_jobs()] == [mine]


def test_the_notify_arrives_only_at_the_commit(
    queue: JobQueue, conn: psycopg.Connection[Any], server: str, table: str
) -> None:
    channel = Tables(table).channel
    with (
        psycopg.connect(server, autocommit=True) as listener,
        psycopg.connect(server, autocommit=True) as marker,
    ):
        listener.execute(f'LISTEN "{channel}"')  # type: ignore[arg-type]
        queue.enqueue("email", {}, connection=conn)
        # Notifications arrive in commit order: the marker, sent after the uncommitted
        # enqueue, comes first unless the enqueue's NOTIFY escaped its transaction.
        marker.execute("SELECT pg_notify(%s, 'marker')", (channel,))
        conn.commit()
        payloads = [n.payload for n in listener.notifies(timeout=10, stop_after=2)]
    assert payloads[0] == "marker"
    assert parse_payload(payloads[1]) == ("email", 0.0)


def test_every_enqueue_goes_through_the_enqueue_connection(
    server: str, table: str, conn: psycopg.Connection[Any]
) -> None:
    given: list[psycopg.Connection[Any] | None] = [conn]
    store = PostgresJobQueue(
        server, table=table, listen_notify=False, enqueue_connection=lambda: given[0]
    )
    queue = JobQueue(store)
    try:
        rolled_back = queue.enqueue("email", {"n": 1})
        conn.rollback()
        assert rolled_back is not None and queue.get_job(rolled_back) is None
        given[0] = None  # None: the store's own pool
        direct = queue.enqueue("email", {"n": 2})
        assert [j.id for j in queue.list_jobs()] == [direct]
    finally:
        queue.shutdown(timeout=5)
        store.close()


def test_a_connection_that_cannot_take_the_job_is_refused(
    queue: JobQueue, server: str, conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(TypeError, match="psycopg"):
        queue.enqueue("email", {}, connection="postgresql://nope")
    closed = psycopg.connect(server)
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        queue.enqueue("email", {}, connection=closed)
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1 / 0")
    with pytest.raises(ValueError, match="failed transaction"):
        queue.enqueue("email", {}, connection=conn)
    conn.rollback()
    assert queue.count_jobs() == 0


def test_an_immediate_queue_refuses_a_connection(
    store: PostgresJobQueue, conn: psycopg.Connection[Any]
) -> None:
    queue = JobQueue(store, immediate=True)
    with pytest.raises(ValueError, match="immediate"):
        queue.enqueue("email", {}, connection=conn)
    assert queue.count_jobs() == 0


def test_a_batch_goes_through_the_enqueue_connection_too(
    server: str, table: str, conn: psycopg.Connection[Any]
) -> None:
    """``enqueue_many`` on a store with an ``enqueue_connection`` (Django's
    ``django://``): the batch joins the caller's transaction, as each ``enqueue`` does."""
    given: list[psycopg.Connection[Any] | None] = [conn]
    store = PostgresJobQueue(
        server, table=table, listen_notify=False, enqueue_connection=lambda: given[0]
    )
    queue = JobQueue(store)
    try:
        rolled_back = queue.enqueue_many(
            [("email", {"n": 1}), ("email", {"n": 2}, {"dedupe_key": "k"})]
        )
        assert all(rolled_back)
        conn.rollback()
        assert queue.count_jobs() == 0
        kept = queue.enqueue_many([("email", {"n": 3}), ("email", {"n": 4}, {"dedupe_key": "k"})])
        conn.commit()
        assert sorted(j.id for j in queue.list_jobs()) == sorted(kept)  # type: ignore[type-var]
    finally:
        queue.shutdown(timeout=5)
        store.close()
