"""A freed concurrency-key slot starts the next held job at once (issue 34): in the process
that freed it, on every store, and in another process through the store's push
(PostgreSQL's NOTIFY, MongoDB's change stream).

Every processor here keeps its default poll interval (5 s, or the push's safety interval
while push is up), which the other flow-control tests shorten: a held job that waited for
the next poll could not finish within the bounds below.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue, MongoJobQueue
from durabl.testing import wait_until
from tests.conftest import (
    cleanup_backend,
    drop_postgres_tables,
    make_backend,
    postgres_table,
    require_mongo,
    require_postgres,
)

KEY = "account:1"
WORK = 0.02  # how long each handler runs
DRAIN = 4.0  # under one default poll interval (5 s, less 20 % jitter)
PUSHED = 5.0  # a pushed pickup, where the only poll left is the 60 s safety poll
SAFETY_POLL = 60.0
KEPT = 1.0  # how long the other process keeps the key once the held job was pushed


class Runs:
    """Handlers that record how many runs overlap and when each ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.ended = 0
        self.started: dict[str, threading.Event] = {}

    def event(self, name: str) -> threading.Event:
        with self.lock:
            return self.started.setdefault(name, threading.Event())

    def work(self, job: Job[Any], ctx: JobContext) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        threading.Event().wait(WORK)  # the job's own work, not a synchronisation
        with self.lock:
            self.running -= 1
            self.ended += 1

    def hold_until(self, release: threading.Event) -> Callable[[Job[Any], JobContext], None]:
        def handler(job: Job[Any], ctx: JobContext) -> None:
            self.event(job.type).set()
            release.wait(30)

        return handler

    def note(self, job: Job[Any], ctx: JobContext) -> None:
        self.event(job.type).set()


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres", "mongodb"])
def test_a_freed_key_starts_the_next_held_job_at_once(store: str) -> None:
    jobs = 3 if store == "mongodb" else 5  # the wire server is slow: few jobs
    backend = make_backend(store)
    backend.startup()
    queue = JobQueue(backend)
    runs = Runs()
    try:
        for n in range(jobs):
            queue.enqueue("sync", {"n": n}, concurrency_key=KEY, concurrency_limit=1)
        started = time.monotonic()
        # A second worker stays idle: a held job can start the moment the key frees.
        queue.process("sync", runs.work, concurrency=2)
        drained = wait_until(lambda: runs.ended == jobs, timeout=DRAIN)
        took = time.monotonic() - started
        assert drained, f"{runs.ended} of {jobs} jobs ran in {took:.1f} s"
        assert runs.most == 1
    finally:
        queue.shutdown(10)
        cleanup_backend(backend)


def test_a_freed_key_wakes_the_workers_of_other_types_that_take_keys_only() -> None:
    """A key may span types: the held job of another type starts at once too, when its
    type declares a key; the workers of a type without keys are not woken."""
    backend = make_backend("memory")
    queue = JobQueue(backend)
    runs = Runs()
    release = threading.Event()
    try:
        queue.process("plain", runs.note)
        queue.process("first", runs.hold_until(release))
        queue.process("second", runs.note, concurrency_key=lambda data: KEY)
        assert wait_until(lambda: all(p.polls >= 1 for p in queue.processors.values()))
        queue.enqueue("first", {}, concurrency_key=KEY)
        assert runs.event("first").wait(DRAIN)
        queue.enqueue("second", {})  # the declared key: held
        assert not runs.event("second").wait(KEPT)
        plain = queue.processors["plain"].polls
        release.set()
        assert runs.event("second").wait(DRAIN)
        assert queue.processors["plain"].polls == plain
    finally:
        release.set()
        queue.shutdown(10)


# -- across processes: the queue that holds the key is not the one waiting on it ---------
class Stores:
    """Three store objects on one set of jobs, as three processes would have: the holder's
    and the waiter's (push on, safety poll at 60 s) and a producer's (no push)."""

    def __init__(self, make: Callable[[bool], Any], close: Callable[[], None]) -> None:
        self.holder = JobQueue(make(True))
        self.waiter = JobQueue(make(True))
        self.producer = JobQueue(make(False))
        self._close = close

    def close(self) -> None:
        for queue in (self.holder, self.waiter, self.producer):
            queue.shutdown(10)
            queue.backend.close()
        self._close()


def postgres_stores() -> Stores:
    url = require_postgres()
    table = postgres_table()
    from durabl.stores.postgres import PostgresJobQueue

    def make(push: bool) -> Any:
        return PostgresJobQueue(
            url, table=table, listen_notify=push, safety_poll_interval=SAFETY_POLL
        )

    return Stores(make, lambda: drop_postgres_tables(table))


def mongo_stores() -> Stores:
    url = require_mongo()
    from pymongo import MongoClient

    name = f"durabl_test_{uuid.uuid4().hex[:8]}"

    def make(push: bool) -> Any:
        client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True)
        return MongoJobQueue(
            client[name],
            owns_client=True,
            use_change_streams=push,
            safety_poll_interval=SAFETY_POLL,
        )

    def drop() -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(url)
        try:
            client.drop_database(name)
        finally:
            client.close()

    return Stores(make, drop)


@pytest.fixture(params=["postgres", "mongodb"])
def stores(request: pytest.FixtureRequest) -> Iterator[Stores]:
    made = postgres_stores() if request.param == "postgres" else mongo_stores()
    yield made
    made.close()


def test_a_key_freed_in_another_process_starts_the_held_job_at_once(stores: Stores) -> None:
    runs = Runs()
    release = threading.Event()
    stores.holder.process("first", runs.hold_until(release))
    stores.waiter.process("second", runs.note)
    for queue in (stores.holder, stores.waiter):
        assert wait_until(lambda q=queue: q.is_healthy().pickup == "push", timeout=30)
    try:
        stores.producer.enqueue("first", {}, concurrency_key=KEY, concurrency_limit=1)
        assert runs.event("first").wait(PUSHED)  # the holder runs it, holding the key
        polls = stores.waiter.processors["second"].polls
        stores.producer.enqueue("second", {}, concurrency_key=KEY, concurrency_limit=1)
        # Pushed to the waiter, which claims nothing: the key is held elsewhere.
        assert wait_until(lambda: stores.waiter.processors["second"].polls > polls, timeout=10)
        # The holder keeps the key a while longer, so that whatever else the enqueue set off
        # in the waiter (on MongoDB, a first keyed claim handed back) plays out meanwhile.
        assert not runs.event("second").wait(KEPT)
    finally:
        release.set()
    assert runs.event("second").wait(PUSHED), "the held job waited for the safety poll"
