"""Every server connection of a running worker is killed (``pg_terminate_backend``), round
after round: the log says so in a few lines, none with a traceback. A claim that met the
kill used to log an ERROR with a thirty-line chained traceback, every time; now each place
that meets an outage (a type's poller, the completer, the heartbeats) logs one WARNING when
it starts failing and one INFO line when it works again."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durabl import Job, JobContext, JobQueue
from durabl.stores.postgres import PostgresJobQueue
from durabl.testing import wait_until
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres

JOBS = 300
KILLS = 6
#: Lines the runtime may log per kill, at WARNING and above: a poller's first failed claim,
#: the completer's first failed write (each followed by an INFO line when it works again).
RUNTIME_WARNINGS_PER_KILL = 2


@pytest.fixture
def table() -> Iterator[str]:
    name = postgres_table()
    yield name
    drop_postgres_tables(name)


def terminate(server: str, application_name: str) -> int:
    with psycopg.connect(server, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_postgres_killed_connections_log_a_few_lines_and_no_traceback(
    table: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = require_postgres()
    sep = "&" if "?" in server else "?"
    worker_name = f"{table}_worker"
    producer = PostgresJobQueue(server, table=table)
    worker_store = PostgresJobQueue(
        f"{server}{sep}application_name={worker_name}", table=table, pool_max_size=4
    )
    ran: list[str] = []
    lock = threading.Lock()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        with lock:
            ran.append(job.id)
        ctx.signal.wait(0.002)

    source = JobQueue(producer)
    for n in range(JOBS):
        source.enqueue("t", {"n": n})
    queue = JobQueue(worker_store, visibility_timeout=5.0)
    killed = 0
    try:
        with caplog.at_level(logging.INFO):
            queue.process("t", handler, concurrency=4, poll_interval=0.01)
            for n in range(1, KILLS + 1):  # spread over the run: each kill hits work in flight
                target = n * JOBS // (KILLS + 2)
                assert wait_until(lambda: len(ran) >= target, timeout=30)  # noqa: B023
                killed += terminate(server, worker_name)
            assert killed >= KILLS, "nothing was killed: nothing tested"
            assert wait_until(lambda: source.get_stats().completed == JOBS, timeout=60)
    finally:
        queue.shutdown(timeout=5)
        worker_store.close()
        producer.close()
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert tracebacks == [], [f"{r.name}: {r.getMessage()}" for r in tracebacks]
    runtime = [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.name.startswith("durabl.runtime") and r.levelno >= logging.WARNING
    ]
    assert len(runtime) <= RUNTIME_WARNINGS_PER_KILL * KILLS, "\n".join(runtime)
