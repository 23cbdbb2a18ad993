"""Schedule controls on every store: a paused schedule fires no tick (in any process, and
after a redeclaration), resuming skips the ticks missed meanwhile, and "run now" enqueues
one job outside the ticks without moving them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from durabl import JobQueue, Schedule, ScheduleError
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import second_view

UTC = timezone.utc


def the(queue: JobQueue, name: str) -> Schedule:
    (found,) = [s for s in queue.list_schedules() if s.name == name]
    return found


def test_a_paused_schedule_fires_no_tick_and_resumes_without_a_burst(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, clock=clock)
    queue.schedule("ping", "ping", every=60, catch_up="all")
    first = the(queue, "ping").next_run_at
    assert first is not None
    queue.pause_schedule("ping")
    assert the(queue, "ping").paused is True

    clock.advance(600)  # ten ticks pass while paused
    queue.scheduler.run_once()
    assert backend.list_jobs(type="ping") == []

    # Another process, and a redeclaration with the same definition, keep the pause.
    other = JobQueue(second_view(backend, clock), clock=clock)
    other.schedule("ping", "ping", every=60, catch_up="all")
    other.scheduler.run_once()
    assert backend.list_jobs(type="ping") == []
    assert the(other, "ping").paused is True

    queue.resume_schedule("ping")
    resumed = the(queue, "ping")
    assert resumed.paused is False
    assert resumed.next_run_at is not None and resumed.next_run_at > backend.now()
    queue.scheduler.run_once()
    assert backend.list_jobs(type="ping") == []  # the missed ticks are skipped
    clock.advance(60)
    queue.scheduler.run_once()
    assert len(backend.list_jobs(type="ping")) == 1  # the next tick fires as usual


def test_run_now_enqueues_one_job_and_leaves_the_ticks_alone(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, clock=clock)
    queue.schedule("report", "report", every=3600, data={"full": True}, priority=2)
    before = the(queue, "report")
    job_id = queue.run_schedule_now("report")
    assert job_id is not None
    job = backend.get_job(job_id)
    assert job is not None
    assert (job.type, job.data, job.priority, job.status) == (
        "report",
        {"full": True},
        2,
        "pending",
    )
    assert job.run_at <= backend.now()
    after = the(queue, "report")
    assert (after.next_run_at, after.last_run_at, after.last_job_id) == (
        before.next_run_at,
        before.last_run_at,
        before.last_job_id,
    )
    queue.pause_schedule("report")
    assert queue.run_schedule_now("report") is not None  # run now works while paused


def test_run_now_of_a_keyed_schedule_says_when_its_slot_is_taken(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, clock=clock)
    queue.schedule("sync", "sync", every=60, dedupe_key="sync")
    assert queue.run_schedule_now("sync") is not None
    assert queue.run_schedule_now("sync") is None


def test_controls_of_an_unknown_schedule_raise(backend: Backend, clock: FakeClock) -> None:
    queue = JobQueue(backend, clock=clock)
    for control in (queue.pause_schedule, queue.resume_schedule, queue.run_schedule_now):
        with pytest.raises(ScheduleError, match="no schedule named 'nope'"):
            control("nope")
    assert queue.list_schedules() == []


def test_a_paused_schedule_loaded_before_its_pause_does_not_fire(
    backend: Backend, clock: FakeClock
) -> None:
    """A scheduler that read the schedule before another process paused it: the firing's
    compare-and-set refuses a paused schedule."""
    queue = JobQueue(backend, clock=clock)
    queue.schedule("ping", "ping", every=60)
    clock.advance(61)
    (stale,) = backend.load_schedules()
    queue.pause_schedule("ping")
    tick = stale.next_run_at
    assert tick is not None and tick <= backend.now()
    fired = backend.fire_schedule(
        stale, tick + timedelta(minutes=1), [(tick, queue.types.tick_job(stale, tick))]
    )
    assert fired is None
    assert backend.list_jobs(type="ping") == []
    assert datetime(2000, 1, 1, tzinfo=UTC) < tick
