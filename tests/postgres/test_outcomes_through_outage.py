"""Handlers that finish while PostgreSQL is down keep their outcomes, however long the
outage: on a private server stopped (``pg_ctl stop -m fast``, as a restart does) for 25 s
and started again, every job whose handler finished during the outage is completed exactly
once, with its result, within about a second of the server answering, and none runs twice.

The completer used to wait 10 s for a connection for the batch, then 10 s for each
completion on its own, and give up ("could not record the outcome ...; the reaper will
recover it"): past a 20 s outage every such job stayed active until the reaper handed it
back, and its handler ran again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue
from durabl.stores.postgres import PostgresJobQueue
from durabl.stores.postgres.listener import ListenSettings
from durabl.testing import wait_until
from tests.postgres.outage import StoppableServer
from tests.postgres.server import NoServerError

pytestmark = pytest.mark.slow

OUTAGE = 25.0
"""Seconds the server stays down: past the 20 s the completer used to wait before it
gave an outcome up."""
LATE = 12.0
"""Seconds into the outage that the second group of handlers finishes: past the 10 s the
first group's batch waits for a connection."""
RECOVERY = 3.0
"""The most seconds from the server answering to every outcome written: the pool's
reconnection (about a second at most), a try in flight returning, one retry wait (at most
a second), and a busy machine."""


@pytest.fixture
def server() -> Iterator[StoppableServer]:
    try:
        stoppable = StoppableServer.start()
    except NoServerError as exc:
        pytest.skip(f"no private PostgreSQL server to stop and start: {exc}")
    yield stoppable
    stoppable.close()


class Held:
    """Handlers that wait for their group's event, then return their job's id; counts
    the runs of each job."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.lock = threading.Lock()
        self.groups = {"early": threading.Event(), "late": threading.Event()}

    def handler(self, job: Job[Any], ctx: JobContext) -> dict[str, str]:
        with self.lock:
            self.runs[job.id] = self.runs.get(job.id, 0) + 1
        self.groups[job.data["group"]].wait(120)
        return {"ran": job.id}

    def started(self) -> int:
        with self.lock:
            return sum(self.runs.values())


def test_outcomes_of_handlers_ended_during_a_long_outage_are_kept(
    server: StoppableServer,
) -> None:
    store = PostgresJobQueue(
        server.url, table="kept_outcomes", listen_settings=ListenSettings(retry_backoff_max=0.5)
    )
    # A lease longer than the outage: this test is about the writes, not the reaper.
    queue = JobQueue(store, visibility_timeout=60)
    held = Held()
    groups = ["early"] * 3 + ["late"] * 3
    try:
        ids = [queue.enqueue("t", {"group": group}) or "" for group in groups]
        queue.process("t", held.handler, concurrency=len(ids))
        queue.start_reaper(interval=1)
        assert wait_until(lambda: held.started() == len(ids), timeout=20)

        down = server.go_down()
        held.groups["early"].set()  # these end as the server goes away
        threading.Event().wait(LATE)  # the outage itself, not a synchronisation
        held.groups["late"].set()  # these end while the first batch is being retried
        threading.Event().wait(max(0.0, OUTAGE - (time.monotonic() - down)))
        up = server.come_back()

        def completed() -> bool:
            jobs = [queue.get_job(job_id) for job_id in ids]
            return all(job is not None and job.status == "completed" for job in jobs)

        assert wait_until(completed, timeout=30, interval=0.05)
        took = time.monotonic() - up
        print(f"outage {up - down:.1f} s; every outcome written {took:.2f} s after the server")
        assert wait_until(lambda: not queue.active_runs(), timeout=10)
        jobs = [queue.get_job(job_id) for job_id in ids]
        assert [(job.attempts, job.result) for job in jobs if job] == [
            (1, {"ran": job_id}) for job_id in ids
        ]
        assert held.runs == dict.fromkeys(ids, 1)  # none ran twice
        assert took < RECOVERY, f"the outcomes were written {took:.1f} s after the server"
    finally:
        for event in held.groups.values():
            event.set()
        queue.shutdown(timeout=10)
        store.close()
