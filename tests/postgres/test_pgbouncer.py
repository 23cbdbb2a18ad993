"""Behind a real PgBouncer in transaction mode (``tests/postgres/bouncer.py``): with
psycopg's prepared statements left on, which ``docs/postgres.md`` says to turn off, every
operation that meets one of them in the wrong server session fails with one error that
names the setting to change, and is not retried as an outage (before, the same mix-up was
a bare ``DurablError``, or, for ``... requires 5``, a ``BackendUnavailableError`` the store
repeated and callers retried for good); with ``prepare_threshold=none`` everything works,
a worker included."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durabl import JobQueue, PreparedStatementsError
from durabl.model.exceptions import BackendUnavailableError, DurablError
from durabl.stores.postgres import PostgresJobQueue
from durabl.stores.postgres.connection import translate
from durabl.testing import wait_until
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres
from tests.postgres.bouncer import Bouncer
from tests.postgres.server import NoServerError

ROUNDS = 20  # psycopg prepares a statement at its 5th run on a connection


@pytest.fixture
def bouncer() -> Iterator[Bouncer]:
    server = require_postgres()
    try:
        running = Bouncer.start(server)
    except NoServerError as exc:
        pytest.skip(f"no PgBouncer to test behind: {exc}")
    yield running
    running.stop()


@pytest.fixture
def table() -> Iterator[str]:
    name = postgres_table()
    PostgresJobQueue(require_postgres(), table=name, listen_notify=False).startup()
    yield name
    drop_postgres_tables(name)


def stores(url: str, table: str, count: int = 2) -> list[PostgresJobQueue]:
    """``count`` stores, each with its pool, as ``backend_from_url`` makes them."""
    return [PostgresJobQueue.from_url(url, table=table, listen_notify=False) for _ in range(count)]


def test_prepared_statements_behind_pgbouncer_fail_with_one_error_naming_the_setting(
    bouncer: Bouncer, table: str
) -> None:
    # Two processes' pools taking turns: PgBouncer hands both the same server session, so
    # the statement the second prepares at its 5th enqueue is already there, or not yet.
    two = stores(bouncer.url, table)
    queues = [JobQueue(store) for store in two]
    errors: list[Exception] = []
    try:
        for n in range(ROUNDS):
            for queue in queues:
                try:
                    queue.enqueue("t", {"n": n})
                    queue.get_stats()
                except DurablError as exc:
                    errors.append(exc)
    finally:
        for store in two:
            store.close()
    assert errors, "no prepared statement met the wrong session: nothing tested"
    for raised in errors:
        assert type(raised) is PreparedStatementsError, raised
        assert "prepare_threshold=none" in str(raised) and "PgBouncer" in str(raised)
        assert '"_pg3_' in str(raised)  # psycopg's own words stay in the message


def test_with_prepare_threshold_none_the_store_and_a_worker_work_behind_pgbouncer(
    bouncer: Bouncer, table: str
) -> None:
    three = stores(f"{bouncer.url}?prepare_threshold=none", table, count=3)
    ran: list[str] = []
    lock = threading.Lock()

    def handler(job: Any, ctx: Any) -> None:
        with lock:
            ran.append(job.id)

    worker = JobQueue(three[0])
    producers = [JobQueue(store) for store in three[1:]]
    try:
        worker.process("t", handler, concurrency=2, poll_interval=0.05)
        ids = [q.enqueue("t", {"n": n}) or "" for n in range(ROUNDS) for q in producers]
        for queue in producers:
            queue.get_stats()
        assert wait_until(lambda: len(ran) == len(ids), timeout=30), len(ran)
        assert sorted(ran) == sorted(ids)
        assert wait_until(lambda: producers[0].get_stats().completed == len(ids), timeout=15)
    finally:
        worker.shutdown(timeout=10)
        for store in three:
            store.close()


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_0" does not exist'),
        psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_0" already exists'),
        psycopg.errors.ProtocolViolation(
            'bind message supplies 3 parameters, but prepared statement "_pg3_0" requires 5'
        ),
    ],
    ids=["does-not-exist", "already-exists", "requires-n"],
)
def test_each_prepared_statement_mixup_is_named_and_none_is_an_outage(error: Exception) -> None:
    """The three ways the mix-up shows, in the server's words (``requires 5`` is a
    protocol violation, sqlstate 08P01, which used to pass for a lost connection)."""
    translated = translate("enqueue", error, "postgresql://app@bouncer:6432/app")
    assert isinstance(translated, PreparedStatementsError)
    assert not isinstance(translated, BackendUnavailableError)
    assert "prepare_threshold=none" in str(translated)


def test_the_constructor_takes_prepare_threshold_from_its_url(bouncer: Bouncer, table: str) -> None:
    url = f"{bouncer.url}?prepare_threshold=none"
    two = [PostgresJobQueue(url, table=table, listen_notify=False) for _ in range(2)]
    try:
        for n in range(ROUNDS):
            for store in two:
                JobQueue(store).enqueue("t", {"n": n})
    finally:
        for store in two:
            store.close()
