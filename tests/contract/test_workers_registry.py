"""The live workers registry on every store: a processing queue records itself, refreshes
its entry, is reported gone when unseen for three intervals, long-gone entries are
removed, and shutdown removes the queue's own entry."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from durabl import Job, JobQueue, WorkerInfo
from durabl.stores.base import Backend
from durabl.testing import FakeClock, wait_until
from tests.contract.support import second_view


def noop(job: Job[object], ctx: object) -> None:
    return None


def entry(
    worker_id: str, backend: Backend, *, seen_ago: float = 0.0, interval: float = 2.0
) -> WorkerInfo:
    now = backend.now()
    return WorkerInfo(
        id=worker_id,
        host="elsewhere",
        pid=4242,
        concurrency={"mail": 3},
        started_at=now - timedelta(hours=3),
        last_seen=now - timedelta(seconds=seen_ago),
        active=1,
        heartbeat_interval=interval,
    )


@pytest.fixture
def queues(backend: Backend, clock: FakeClock) -> Iterator[list[JobQueue]]:
    made: list[JobQueue] = []
    yield made
    for queue in made:
        queue.shutdown(timeout=1)


def test_a_processing_queue_records_itself_with_its_types_and_concurrency(
    backend: Backend, clock: FakeClock, queues: list[JobQueue]
) -> None:
    queue = JobQueue(backend, clock=clock)
    queues.append(queue)
    assert queue.list_workers() == []
    queue.process("mail", noop, concurrency=2)
    queue.process("thumbs", noop, heartbeat_interval=5)
    (info,) = queue.list_workers()
    assert info.id == queue.presence.id
    assert (info.host, info.pid) == (socket.gethostname(), os.getpid())
    assert info.concurrency == {"mail": 2, "thumbs": 1}
    assert info.types == ("mail", "thumbs")
    assert info.started_at == info.last_seen == backend.now()
    assert info.active == 0
    assert info.heartbeat_interval == 5.0  # the shortest of its processors
    assert (info.gone, info.state) == (False, "alive")


def test_a_refresh_moves_last_seen_and_records_the_active_runs(
    backend: Backend, clock: FakeClock, queues: list[JobQueue]
) -> None:
    release = threading.Event()

    def hold(job: Job[object], ctx: object) -> None:
        release.wait(10)

    queue = JobQueue(backend, clock=clock)
    queues.append(queue)
    queue.process("slow", hold)
    (first,) = queue.list_workers()
    queue.enqueue("slow", {})
    queue.processors["slow"].wake()
    assert wait_until(lambda: len(queue.active_runs()) == 1)
    clock.advance(30)
    assert queue.presence.beat()
    (later,) = queue.list_workers()
    release.set()
    assert later.started_at == first.started_at
    assert later.last_seen == first.last_seen + timedelta(seconds=30)
    assert later.active == 1


def test_an_entry_unseen_for_three_intervals_is_reported_gone(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, clock=clock)
    backend.upsert_worker(entry("w-1", backend, interval=2.0))
    clock.advance(5.9)
    (info,) = queue.list_workers()
    assert not info.gone
    clock.advance(0.2)
    (info,) = queue.list_workers()
    assert (info.gone, info.state) == (True, "gone")
    assert (info.host, info.pid, info.active) == ("elsewhere", 4242, 1)
    assert info.concurrency == {"mail": 3}


def test_store_primitives_replace_delete_and_prune_entries(
    backend: Backend, clock: FakeClock
) -> None:
    backend.startup()
    backend.upsert_worker(entry("w-1", backend))
    backend.upsert_worker(entry("w-2", backend, seen_ago=7200))
    backend.upsert_worker(entry("w-1", backend, interval=9.0))  # replaces
    assert sorted((w.id, w.heartbeat_interval) for w in backend.load_workers()) == [
        ("w-1", 9.0),
        ("w-2", 2.0),
    ]
    assert backend.prune_workers(backend.now() - timedelta(hours=1)) == 1
    assert [w.id for w in backend.load_workers()] == ["w-1"]
    assert backend.delete_worker("w-1") is True
    assert backend.delete_worker("w-1") is False
    assert backend.load_workers() == []


def test_a_live_queue_removes_entries_gone_for_an_hour(
    backend: Backend, clock: FakeClock, queues: list[JobQueue]
) -> None:
    backend.startup()
    backend.upsert_worker(entry("long-gone", backend, seen_ago=3601))
    backend.upsert_worker(entry("just-gone", backend, seen_ago=60))
    queue = JobQueue(backend, clock=clock)
    queues.append(queue)
    queue.process("mail", noop)
    shown = {w.id: w.gone for w in queue.list_workers()}
    assert shown == {"just-gone": True, queue.presence.id: False}


def test_two_queues_in_one_process_are_two_entries_and_shutdown_removes_its_own(
    backend: Backend, clock: FakeClock, queues: list[JobQueue]
) -> None:
    one = JobQueue(backend, clock=clock)
    other = JobQueue(second_view(backend, clock), clock=clock)
    queues += [one, other]
    one.process("mail", noop)
    other.process("thumbs", noop, concurrency=4)
    shown = {w.id: w.concurrency for w in one.list_workers()}
    assert shown == {one.presence.id: {"mail": 1}, other.presence.id: {"thumbs": 4}}
    assert other.list_workers() == one.list_workers()
    other.shutdown(timeout=1)
    assert [w.id for w in one.list_workers()] == [one.presence.id]
