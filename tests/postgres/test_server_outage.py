"""A worker rides out a PostgreSQL outage on a private server stopped (``pg_ctl stop -m
fast``, as a restart does) and started again: it takes a job that fell due during the
outage within about a second of the server answering again, and a handler that finished
during the outage keeps its outcome (written once the server is back, not run again).

Before durabl's pool kept its reconnection waits short (``durabl.stores.postgres.reconnect``),
psycopg_pool's doubling waits (1, 2, 4, 8, 16 s ...) left the worker idle after the server
was back (after this 17 s outage: 10.8 and 11.7 s, and the held handler's outcome was lost;
now 0.0-0.6 s), and a claim meeting a connection closed by a restart failed instead of
taking another one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue
from durabl.stores.postgres import PostgresJobQueue
from durabl.stores.postgres.listener import ListenSettings
from durabl.testing import wait_until
from tests.postgres.outage import StoppableServer
from tests.postgres.server import NoServerError

pytestmark = pytest.mark.slow

OUTAGE = 17.0
"""Seconds the server stays down: just past psycopg_pool's attempt at 15 s (1+2+4+8), so
its next is at 31 s; short of the ~20 s a completion waits for a connection (two pool
timeouts, from the handler's end at about 0 s), so its outcome can be kept."""
PICKUP = 2.0
"""The most seconds from the server answering to the due job's handler running."""


@pytest.fixture
def server() -> Iterator[StoppableServer]:
    try:
        stoppable = StoppableServer.start()
    except NoServerError as exc:
        pytest.skip(f"no private PostgreSQL server to stop and start: {exc}")
    yield stoppable
    stoppable.close()


class Runs:
    """When each job's handler ran (monotonic seconds); the job ``held`` waits for
    :attr:`release` before it returns."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = {}
        self.lock = threading.Lock()
        self.held_started = threading.Event()
        self.release = threading.Event()

    def handler(self, job: Job[Any], ctx: JobContext) -> dict[str, str]:
        with self.lock:
            self.at.setdefault(job.id, []).append(time.monotonic())
        if job.data.get("held"):
            self.held_started.set()
            self.release.wait(60)
        return {"ran": job.id}

    def count(self, job_id: str) -> int:
        with self.lock:
            return len(self.at.get(job_id, []))

    def first(self, job_id: str) -> float:
        with self.lock:
            return self.at[job_id][0]


def test_a_worker_takes_a_due_job_within_seconds_of_the_server_coming_back(
    server: StoppableServer,
) -> None:
    # The listener's own reconnection waits (up to 1 s by default) are not under test:
    # cap them so the time measured is the pool's.
    store = PostgresJobQueue(
        server.url, table="outage_jobs", listen_settings=ListenSettings(retry_backoff_max=0.5)
    )
    queue = JobQueue(store, visibility_timeout=120)  # no lease runs out during the test
    runs = Runs()
    try:
        queue.process("t", runs.handler, concurrency=2)
        warm = queue.enqueue("t", {}) or ""
        assert wait_until(lambda: runs.count(warm) == 1, timeout=15)
        held = queue.enqueue("t", {"held": True}) or ""
        assert runs.held_started.wait(15)
        due = queue.enqueue("t", {}, run_at=store.now() + timedelta(seconds=OUTAGE / 2)) or ""

        down = server.go_down()
        runs.release.set()  # the held handler ends while the server is down
        threading.Event().wait(OUTAGE)  # the outage itself, not a synchronisation
        up = server.come_back()

        assert wait_until(lambda: runs.count(due) >= 1, timeout=40, interval=0.01)
        pickup = runs.first(due) - up
        print(f"outage {up - down:.1f} s; due job ran {pickup:.2f} s after the server answered")

        def settled() -> bool:
            jobs = [queue.get_job(held), queue.get_job(due)]
            return all(job is not None and job.status == "completed" for job in jobs)

        assert wait_until(settled, timeout=40, interval=0.1)
        assert pickup < PICKUP, f"the due job ran {pickup:.1f} s after the server answered"
        # The held handler's completion was written once the server was back: it kept
        # its outcome and did not run again.
        assert (runs.count(held), runs.count(due)) == (1, 1)
        held_job = queue.get_job(held)
        assert held_job is not None and held_job.attempts == 1
        assert held_job.result == {"ran": held}
    finally:
        runs.release.set()
        queue.shutdown(timeout=10)
        store.close()


def test_claims_right_after_a_restart_pass_over_the_connections_it_closed(
    server: StoppableServer,
) -> None:
    """A restart of a second: every connection idle in the pool was closed by the server,
    and a claim (never repeated by the store: it may have applied) that met one used to
    fail, so a worker backed off once per pooled connection (10, 20, 30 s)."""
    store = PostgresJobQueue(server.url, table="restart_jobs", pool_min_size=4, listen_notify=False)
    queue = JobQueue(store)
    ran: list[str] = []
    try:
        queue.register("t", lambda job, ctx: ran.append(job.id))
        ids = [queue.enqueue("t", {}) for _ in range(3)]
        pool = store._db.pool()
        assert wait_until(lambda: pool.get_stats()["pool_available"] >= 4, timeout=15)

        server.go_down()
        server.come_back()

        assert [queue.run_pending("t", limit=1) for _ in ids] == [1, 1, 1]
        assert ran == ids
    finally:
        queue.shutdown(timeout=10)
        store.close()
