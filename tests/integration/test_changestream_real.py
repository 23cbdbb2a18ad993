"""Push pickup against a real replica set: ``MONGO_URL``, or a testcontainers replica set
when a Docker engine answers. Skips with the reason where neither exists; under
``make test-mongo`` (``DURABL_REQUIRE_MONGO=1``) a missing server fails instead.

What a real server proves that the scripted stream cannot: the pipeline is accepted and
keeps payloads off the wire, resume tokens resume, a dropped collection restarts the
stream, and pickup takes well under a second while workers poll every 60 s. Falling back
when the stream keeps failing is covered by the unit tests only (a server that fails on
cue is hard to arrange).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from durabl import Job, JobContext, JobEvent, JobQueue, MongoJobQueue
from durabl.stores.mongo.changestream import PROJECTED_FIELDS, claimable_pipeline
from durabl.testing import wait_until
from tests.conftest import require_mongo

PICKUP_BUDGET = 1.0  # seconds from enqueue (or run_at) to handler start


@pytest.fixture
def db() -> Iterator[Database[dict[str, Any]]]:
    url = require_mongo()
    client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True)
    name = f"durabl_cs_{uuid.uuid4().hex[:8]}"
    try:
        yield client[name]
    finally:
        client.drop_database(name)
        client.close()


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def consumer(db: Database[dict[str, Any]], events: list[JobEvent]) -> Iterator[JobQueue]:
    """Workers with push pickup, on their default poll interval."""
    queue = JobQueue(MongoJobQueue(db, use_change_streams=True), on_job_event=events.append)
    yield queue
    queue.shutdown(timeout=5)


@pytest.fixture
def producer(db: Database[dict[str, Any]]) -> Iterator[JobQueue]:
    """Another queue on the same collection, as another process would be: its enqueues
    cannot wake the consumer's workers directly."""
    queue = JobQueue(MongoJobQueue(db))
    yield queue
    queue.shutdown(timeout=5)


def push_is_up(queue: JobQueue, type: str) -> None:
    assert wait_until(lambda: queue.is_healthy().pickup == "push", timeout=15), queue.is_healthy()
    # From here on an idle worker polls every 60 s (its current wait, started at the
    # normal 5 s interval, may still end once: one of several pickups could be a poll).
    assert queue.processors[type].poll_interval == 60.0


def test_startup_on_a_replica_set_enables_push(db: Database[dict[str, Any]]) -> None:
    backend = MongoJobQueue(db, use_change_streams=True)
    backend.startup()
    assert backend.supports_push


def test_pickup_takes_under_a_second_while_workers_poll_every_minute(
    consumer: JobQueue, producer: JobQueue, events: list[JobEvent]
) -> None:
    started: dict[int, float] = {}

    def handler(job: Job[Any], ctx: JobContext) -> None:
        started[job.data["n"]] = time.monotonic()

    consumer.process("t", handler)
    push_is_up(consumer, "t")
    latencies = []
    for n in range(5):
        sent = time.monotonic()
        producer.enqueue("t", {"n": n})
        assert wait_until(started.__len__, timeout=10), f"job {n} was not picked up"
        latencies.append(started.pop(n) - sent)
    assert max(latencies) < PICKUP_BUDGET, latencies
    assert "changestream-connected" in [e.kind for e in events]


def test_a_future_job_is_woken_at_its_run_at(consumer: JobQueue, producer: JobQueue) -> None:
    ran = threading.Event()
    consumer.process("later", lambda job, ctx: ran.set())
    push_is_up(consumer, "later")
    due = time.monotonic() + 1.5
    producer.enqueue("later", {}, delay=1.5)
    assert ran.wait(10)
    assert time.monotonic() - due < PICKUP_BUDGET


@pytest.mark.parametrize("debounce_max", [None, 60.0], ids=["unbounded", "bounded"])
def test_a_debounced_job_is_woken_at_its_pushed_run_at(
    consumer: JobQueue, producer: JobQueue, debounce_max: float | None
) -> None:
    ran: list[float] = []
    consumer.process("later", lambda job, ctx: ran.append(time.monotonic()))
    push_is_up(consumer, "later")
    # The burst's gaps (0.3 s, plus one enqueue on the wire server, which can take a few
    # tenths under load) stay well inside the debounce, so every later enqueue finds the
    # job still pending.
    debounce = 1.0
    options: dict[str, Any] = {
        "dedupe_key": "k",
        "debounce": debounce,
        "debounce_max": debounce_max,
    }
    producer.enqueue("later", {}, **options)
    for _ in range(3):  # each push moves the job past the timer the last one set
        time.sleep(0.3)  # the burst's pace (real time is what is tested), not a wait
        last = time.monotonic()
        assert producer.enqueue("later", {}, **options) is None
    assert wait_until(ran.__len__, timeout=10), "the pushed job was not woken"
    assert debounce - 0.05 <= ran[0] - last < debounce + PICKUP_BUDGET
    assert len(ran) == 1


def test_a_retry_is_pushed_when_its_backoff_ends(consumer: JobQueue, producer: JobQueue) -> None:
    attempts: list[float] = []

    def flaky(job: Job[Any], ctx: JobContext) -> None:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")

    consumer.process("flaky", flaky)
    push_is_up(consumer, "flaky")
    producer.enqueue("flaky", {}, backoff="fixed", backoff_delay=0.5)
    assert wait_until(lambda: len(attempts) >= 2, timeout=10)
    assert attempts[1] - attempts[0] < 0.5 + PICKUP_BUDGET


def test_the_pipeline_keeps_payloads_off_the_wire(db: Database[dict[str, Any]]) -> None:
    backend = MongoJobQueue(db, use_change_streams=True)
    backend.startup()
    secret = {"card": "4111 1111 1111 1111"}
    later = datetime.now(timezone.utc) + timedelta(minutes=5)
    with backend.col.watch(claimable_pipeline(), max_await_time_ms=200) as stream:
        producer = JobQueue(backend)
        job_id = producer.enqueue("mail", secret)
        backend.col.update_one(
            {"type": "mail"},
            {"$set": {"heartbeat_at": datetime.now(timezone.utc), "data": secret}},
        )  # not claimable: filtered out on the server
        backend.col.update_one(
            {"type": "mail"},
            {"$set": {"run_at": later, "data": {"card": "again"}}},
        )
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            event = stream.try_next()
            if event is not None:
                seen.append(event)
    assert [e["operationType"] for e in seen] == ["insert", "update"]
    inserted, updated = seen
    assert inserted["fullDocument"] == {
        "type": "mail",
        "status": "pending",
        "run_at": inserted["fullDocument"]["run_at"],
    }
    assert str(updated["documentKey"]["_id"]) == job_id
    allowed = {name.split(".")[0] for name in PROJECTED_FIELDS} | {"_id"}
    for event in seen:
        assert set(event) <= allowed
        assert "card" not in repr(event)


def test_a_resume_token_replays_what_happened_while_closed(
    db: Database[dict[str, Any]],
) -> None:
    backend = MongoJobQueue(db)
    backend.startup()
    with backend.col.watch(claimable_pipeline(), max_await_time_ms=100) as stream:
        assert stream.try_next() is None
        token = stream.resume_token
    assert token is not None
    job_id = JobQueue(backend).enqueue("missed", {})
    with backend.col.watch(claimable_pipeline(), resume_after=token) as stream:
        event = None
        deadline = time.monotonic() + 10
        while event is None and time.monotonic() < deadline:
            event = stream.try_next()
    assert event is not None
    assert str(event["documentKey"]["_id"]) == job_id


def test_dropping_the_collection_restarts_the_stream_after_it(
    consumer: JobQueue, producer: JobQueue, events: list[JobEvent]
) -> None:
    ran = threading.Event()
    consumer.process("t", lambda job, ctx: ran.set())
    push_is_up(consumer, "t")
    assert isinstance(consumer.backend, MongoJobQueue)
    consumer.backend.col.drop()
    assert wait_until(
        lambda: any(e.extra.get("kind") == "invalidate" for e in events), timeout=10
    ), [e.kind for e in events]
    assert wait_until(lambda: consumer.is_healthy().pickup == "push", timeout=15)
    assert [e.kind for e in events].count("changestream-connected") >= 2
    sent = time.monotonic()
    producer.enqueue("t", {})
    assert ran.wait(10)
    assert time.monotonic() - sent < PICKUP_BUDGET


def test_shutdown_closes_the_stream_and_joins_the_thread(
    consumer: JobQueue, events: list[JobEvent]
) -> None:
    consumer.process("t", lambda job, ctx: None)
    push_is_up(consumer, "t")
    assert "durabl-changestream" in [t.name for t in threading.enumerate()]
    consumer.shutdown(timeout=5)
    assert "durabl-changestream" not in [t.name for t in threading.enumerate()]
    assert [e.kind for e in events].count("changestream-closed") == 1
    assert not consumer.is_healthy()
