"""A running worker's server connections are killed (``pg_terminate_backend``) while it
processes jobs: the pool reconnects, and every job completes once as far as the store
records, its handler run once (twice only after a lost lease, which a kill can cause)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.stores.postgres import PostgresJobQueue
from durabl.testing import wait_until
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres

JOBS = 400
KILLS = 6


@pytest.fixture
def table() -> Iterator[str]:
    name = postgres_table()
    yield name
    drop_postgres_tables(name)


def terminate(server: str, application_name: str) -> int:
    """Kill every server process of ``application_name``'s connections; how many."""
    with psycopg.connect(server, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_worker_whose_connections_are_terminated_reconnects_and_loses_nothing(
    table: str,
) -> None:
    server = require_postgres()
    sep = "&" if "?" in server else "?"
    worker_name = f"{table}_worker"
    producer = PostgresJobQueue(server, table=table)
    worker_store = PostgresJobQueue(
        f"{server}{sep}application_name={worker_name}", table=table, pool_max_size=4
    )
    runs: Counter[str] = Counter()
    lost: list[str] = []
    lock = threading.Lock()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        with lock:
            runs[job.id] += 1
        ctx.signal.wait(0.004)

    def on_event(event: JobEvent) -> None:
        if event.kind == "lease-lost":
            lost.append(event.job_id or "")

    source = JobQueue(producer)
    ids = [source.enqueue("t", {"n": n}) or "" for n in range(JOBS)]
    queue = JobQueue(worker_store, visibility_timeout=1.0, on_job_event=on_event)
    killed = 0
    try:
        queue.process("t", handler, concurrency=4, poll_interval=0.05)
        queue.start_reaper(interval=0.2)
        for n in range(1, KILLS + 1):  # spread over the run: each kill hits work in flight
            target = n * JOBS // (KILLS + 2)
            assert wait_until(lambda target=target: len(runs) >= target, timeout=15), len(runs)
            killed += terminate(server, worker_name)
        assert killed >= KILLS, "nothing was killed: nothing tested"

        def settled() -> bool:
            stats = source.get_stats()
            return stats.completed == JOBS and stats.pending + stats.active == 0

        assert wait_until(settled, timeout=30, interval=0.05), source.get_stats()
    finally:
        queue.shutdown(timeout=5)
        worker_store.close()
    jobs = {job.id: job for job in source.list_jobs(limit=0)}
    assert set(jobs) == set(ids), "every job is stored, and nothing else"
    assert {job.status for job in jobs.values()} == {"completed"}
    assert set(runs) == set(ids), "every job's handler ran"
    twice = {job_id for job_id, n in runs.items() if n > 1}
    assert twice <= set(lost), "a handler ran twice without a lost lease"
    assert all(job.attempts == runs[job_id] for job_id, job in jobs.items())
    producer.close()
