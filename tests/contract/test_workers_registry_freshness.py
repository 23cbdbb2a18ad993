"""The workers registry tells the truth on every store: a queue that shut down is gone from
it when ``shutdown()`` returns, even when the drain timed out on a handler that ignores its
signal and the store is slow to delete; and the entry's active count follows the queue's
runs within a tenth of the heartbeat interval, not one interval later."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from durabl import Job, JobQueue
from durabl.model.clock import SYSTEM_CLOCK
from durabl.stores.base import Backend
from durabl.testing import FakeClock, wait_until

#: A handler that never looks at ``ctx.signal`` holds its thread until the test ends.
STUCK_FOR = 30.0


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_timed_out_drain_leaves_no_entry_when_shutdown_returns(
    backend: Backend, release: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()

    def ignores_stop(job: Job[object], ctx: object) -> None:
        started.set()
        release.wait(STUCK_FOR)

    store_delete = backend.delete_worker

    def slow_delete(worker_id: str) -> bool:
        time.sleep(0.3)  # a store under load: the removal takes a while
        return store_delete(worker_id)

    monkeypatch.setattr(backend, "delete_worker", slow_delete)
    # The drain's deadlines on real time (the store keeps its fake clock for timestamps).
    queue = JobQueue(backend, clock=SYSTEM_CLOCK)
    queue.process("stuck", ignores_stop)
    queue.enqueue("stuck", {})
    queue.processors["stuck"].wake()
    assert started.wait(30)
    assert [w.id for w in queue.list_workers()] == [queue.presence.id]
    queue.shutdown(timeout=0.2)
    assert [w.id for w in backend.load_workers()] == []
    job = queue.list_jobs(type="stuck")[0]
    assert job.status == "pending"  # handed back, as before


def test_the_active_count_follows_the_runs_within_a_tenth_of_the_interval(
    backend: Backend, clock: FakeClock, release: threading.Event
) -> None:
    started = threading.Event()

    def hold(job: Job[object], ctx: object) -> None:
        started.set()
        release.wait(STUCK_FOR)

    queue = JobQueue(backend, clock=clock)
    try:
        # A 10 s interval: the count is looked at every second, the entry refreshed
        # every 10 s when nothing changes.
        queue.process("slow", hold, heartbeat_interval=10)
        (entry,) = queue.list_workers()
        assert entry.active == 0
        queue.enqueue("slow", {})
        queue.processors["slow"].wake()
        assert started.wait(30)
        assert wait_until(lambda: [w.active for w in queue.list_workers()] == [1], timeout=5)
        release.set()
        assert wait_until(lambda: [w.active for w in queue.list_workers()] == [0], timeout=5)
    finally:
        release.set()
        queue.shutdown(timeout=5)
