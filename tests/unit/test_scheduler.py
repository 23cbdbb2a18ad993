"""The scheduler thread: idempotent start, a named thread that shutdown() stops at once
(even mid-sleep), at most one store query per second however many schedules are due, and
declarations with ``durabl.schedule`` stored by start_scheduler()."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

import durabl
from durabl import JobQueue, MemoryBackend, Schedule, ScheduleError
from durabl.runtime.scheduler import forget_declared
from durabl.testing import wait_until


class CountingBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load_schedules(self) -> list[Schedule]:
        self.loads += 1
        return super().load_schedules()


@pytest.fixture(autouse=True)
def no_declarations() -> Iterator[None]:
    forget_declared()
    yield
    forget_declared()


def scheduler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "durabl-scheduler"]


def test_start_is_idempotent_and_shutdown_stops_a_sleeping_scheduler_at_once() -> None:
    queue = JobQueue(MemoryBackend())
    queue.schedule("hourly", "report", cron="0 * * * *")
    queue.start_scheduler()
    queue.start_scheduler()
    assert len(scheduler_threads()) == 1
    began = time.monotonic()
    queue.shutdown(timeout=1)
    assert time.monotonic() - began < 1.0
    assert scheduler_threads() == []


def test_at_most_one_query_per_second_however_many_schedules_are_due() -> None:
    backend = CountingBackend()
    queue = JobQueue(backend)
    for n in range(20):
        queue.schedule(f"s{n}", "tick", every=0.001)  # due all the time
    queue.start_scheduler()
    assert wait_until(lambda: backend.loads >= 1)
    began = time.monotonic()
    time.sleep(2.5)  # real time is what the bound is about
    loads = backend.loads
    elapsed = time.monotonic() - began
    queue.shutdown(timeout=1)
    assert loads <= elapsed + 2
    assert backend.count_jobs(type="tick") >= 20  # it did fire, once a pass


def test_declared_schedules_are_stored_by_start_scheduler() -> None:
    durabl.schedule("ping", "ping", every=30, data={"source": "schedule"})
    durabl.schedule("nightly", "report", cron="0 2 * * *", timezone="Europe/Paris")
    queue = JobQueue(MemoryBackend())
    assert queue.list_schedules() == []  # declaring does no I/O
    queue.start_scheduler()
    try:
        stored = {s.name: s for s in queue.list_schedules()}
        assert set(stored) == {"ping", "nightly"}
        assert stored["ping"].every == 30 and stored["ping"].data == {"source": "schedule"}
        assert stored["nightly"].cron == "0 2 * * *"
        assert stored["nightly"].timezone == "Europe/Paris"
    finally:
        queue.shutdown(timeout=1)


def test_a_bad_declaration_raises_where_it_is_made() -> None:
    with pytest.raises(ScheduleError, match="exactly one"):
        durabl.schedule("bad", "t", cron="* * * * *", every=5)
    with pytest.raises(ScheduleError, match="invalid cron"):
        durabl.schedule("bad", "t", cron="0 25 * * *")


def test_start_scheduler_after_shutdown_is_refused() -> None:
    queue = JobQueue(MemoryBackend())
    queue.shutdown(timeout=1)
    with pytest.raises(durabl.QueueShutdownError):
        queue.start_scheduler()


def test_a_schedule_that_cannot_fire_does_not_hold_up_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The "durabl" logger's own level, whatever a test before left it at (the CLI's quiet
    # mode sets it to CRITICAL while a command runs).
    caplog.set_level(logging.ERROR, logger="durabl")
    backend = MemoryBackend()
    queue = JobQueue(backend)
    queue.enqueue("other", {}, dedupe_key="k", dedupe_scope="pending")  # the key's live scope
    queue.schedule("clash", "tick", every=0.001, dedupe_key="k")  # the other scope: refused
    queue.schedule("fine", "tick", every=0.001)
    assert wait_until(
        lambda: queue.scheduler.run_once() is not None and backend.count_jobs(type="tick")
    )
    assert "schedule clash could not fire" in caplog.text
