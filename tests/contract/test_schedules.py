"""Schedules on every store: ticks at their instant, one job per tick however many
schedulers race, catch-up after downtime, declarations stored idempotently."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from durabl import JobQueue, Schedule, ScheduleError
from durabl.model.schedule import plan_firing, tick_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import second_view

UTC = timezone.utc


def queue_on(backend: Backend, clock: FakeClock) -> JobQueue:
    return JobQueue(backend, clock=clock)


def the(queue: JobQueue, name: str) -> Schedule:
    (found,) = [s for s in queue.list_schedules() if s.name == name]
    return found


def jobs_of(backend: Backend, type: str) -> list[tuple[datetime, object]]:
    return sorted((job.run_at, job.data) for job in backend.list_jobs(type=type, limit=0))


def test_an_every_schedule_enqueues_one_job_per_tick_at_the_tick(
    backend: Backend, clock: FakeClock
) -> None:
    queue = queue_on(backend, clock)
    clock.advance(7.5)  # 00:00:07.5
    queue.schedule("ping", "ping", every=60, data={"source": "schedule"}, priority=3)
    first = datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
    assert the(queue, "ping").next_run_at == first
    assert queue.scheduler.run_once() == first
    assert jobs_of(backend, "ping") == []

    clock.advance(60 - 7.5 + 0.25)  # just past the tick
    assert queue.scheduler.run_once() == first + timedelta(minutes=1)
    assert queue.scheduler.run_once() == first + timedelta(minutes=1)  # nothing new
    assert jobs_of(backend, "ping") == [(first, {"source": "schedule"})]
    (job,) = backend.list_jobs(type="ping")
    assert job.priority == 3
    state = the(queue, "ping")
    assert (state.type, state.every, state.cron, state.timezone) == ("ping", 60.0, None, "UTC")
    assert state.last_run_at == first and state.last_job_id == job.id
    assert state.next_run_at == first + timedelta(minutes=1)


def test_racing_schedulers_over_one_store_enqueue_each_tick_once(
    backend: Backend, clock: FakeClock
) -> None:
    one = queue_on(backend, clock)
    other_backend = second_view(backend, clock)
    two = queue_on(other_backend, clock)
    one.schedule("s", "tick", every=1)
    two.schedule("s", "tick", every=1)  # the same declaration: nothing changes
    for _ in range(5):
        clock.advance(1)
        two.scheduler.run_once()
        one.scheduler.run_once()
        two.scheduler.run_once()
    ticks = [at for at, _ in jobs_of(backend, "tick")]
    assert ticks == [datetime(2030, 1, 1, 0, 0, n, tzinfo=UTC) for n in range(1, 6)]


def test_a_stale_firing_is_refused_and_writes_nothing(backend: Backend, clock: FakeClock) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("s", "tick", every=10)
    clock.advance(10)
    stale = the(queue, "s")  # read by a scheduler that then stalls
    queue.scheduler.run_once()  # another fires the tick
    firing = plan_firing(stale, clock.now())
    assert firing is not None
    jobs = [(tick, tick_job(stale, tick)) for tick in firing.ticks]
    assert backend.fire_schedule(stale, firing.next_run_at, jobs) is None
    assert len(jobs_of(backend, "tick")) == 1
    assert queue.delete_schedule("s") is True
    assert backend.fire_schedule(the_missing := stale, firing.next_run_at, jobs) is None
    assert the_missing.name == "s" and len(jobs_of(backend, "tick")) == 1


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [("latest", [240]), ("none", []), ("all", [60, 120, 180, 240])],
)
def test_catch_up_after_downtime(
    backend: Backend, clock: FakeClock, catch_up: str, expected: list[int]
) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("s", "tick", every=60, catch_up=catch_up)
    clock.advance(270)  # the ticks at 1, 2, 3 and 4 minutes were missed; the last by 30 s
    queue.scheduler.run_once()
    start = datetime(2030, 1, 1, tzinfo=UTC)
    ticks = [at for at, _ in jobs_of(backend, "tick")]
    assert ticks == [start + timedelta(seconds=n) for n in expected]
    assert the(queue, "s").next_run_at == start + timedelta(minutes=5)


def test_catch_up_none_still_enqueues_a_tick_seen_on_time(
    backend: Backend, clock: FakeClock
) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("s", "tick", every=10, catch_up="none")
    clock.advance(10.5)
    queue.scheduler.run_once()
    assert len(jobs_of(backend, "tick")) == 1


def test_catch_up_all_keeps_the_newest_hundred(backend: Backend, clock: FakeClock) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("s", "tick", every=1, catch_up="all")
    clock.advance(250.5)
    queue.scheduler.run_once()
    ticks = [at for at, _ in jobs_of(backend, "tick")]
    start = datetime(2030, 1, 1, tzinfo=UTC)
    assert ticks == [start + timedelta(seconds=n) for n in range(151, 251)]


def test_cron_in_a_time_zone_ticks_at_local_time_across_dst(
    backend: Backend, clock: FakeClock
) -> None:
    clock.advance(timedelta(days=88, hours=12))  # 30 March 2030, noon; DST starts the 31st
    queue = queue_on(backend, clock)
    queue.schedule("nightly", "report", cron="30 2 * * *", timezone="Europe/Paris")
    # 02:30 does not exist on 31 March in Paris: croniter takes the next instant, 03:00.
    assert the(queue, "nightly").next_run_at == datetime(2030, 3, 31, 1, 0, tzinfo=UTC)
    clock.advance(timedelta(hours=13, seconds=1))
    queue.scheduler.run_once()
    assert the(queue, "nightly").next_run_at == datetime(2030, 4, 1, 0, 30, tzinfo=UTC)
    assert [at for at, _ in jobs_of(backend, "report")] == [datetime(2030, 3, 31, 1, tzinfo=UTC)]


def test_six_field_cron_has_seconds_first(backend: Backend, clock: FakeClock) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("fast", "tick", cron="*/15 * * * * *")
    assert the(queue, "fast").next_run_at == datetime(2030, 1, 1, 0, 0, 15, tzinfo=UTC)
    clock.advance(31)
    queue.scheduler.run_once()  # latest: the 30 s tick only
    assert [at for at, _ in jobs_of(backend, "tick")] == [
        datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    ]


def test_redeclaring_keeps_state_and_redefining_moves_the_next_tick(
    backend: Backend, clock: FakeClock
) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("s", "tick", every=10)
    clock.advance(10)
    queue.scheduler.run_once()
    before = the(queue, "s")
    clock.advance(3)
    queue.schedule("s", "tick", every=10)
    assert the(queue, "s") == before
    queue.schedule("s", "tick", every=60, data={"v": 2})
    after = the(queue, "s")
    assert after.every == 60 and after.data == {"v": 2}
    assert after.next_run_at == datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
    assert (after.last_run_at, after.last_job_id) == (before.last_run_at, before.last_job_id)


def test_delete_schedule(backend: Backend, clock: FakeClock) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("a", "tick", every=10)
    queue.schedule("b", "tick", every=10)
    assert [s.name for s in queue.list_schedules()] == ["a", "b"]
    assert queue.delete_schedule("a") is True
    assert queue.delete_schedule("a") is False
    clock.advance(10)
    queue.scheduler.run_once()
    assert [s.name for s in queue.list_schedules()] == ["b"]
    assert len(jobs_of(backend, "tick")) == 1


def test_a_tick_whose_dedupe_slot_is_taken_enqueues_nothing_and_moves_on(
    backend: Backend, clock: FakeClock
) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("s", "tick", every=10, dedupe_key="only-one")
    clock.advance(10)
    queue.scheduler.run_once()
    clock.advance(10)
    queue.scheduler.run_once()
    assert len(jobs_of(backend, "tick")) == 1
    state = the(queue, "s")
    assert state.last_run_at == datetime(2030, 1, 1, 0, 0, 20, tzinfo=UTC)
    assert state.last_job_id is None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, "exactly one of cron= or every="),
        ({"cron": "* * * * *", "every": 5}, "exactly one"),
        ({"cron": "* * * *"}, "5 fields"),
        ({"cron": "61 * * * *"}, "invalid cron"),
        ({"every": 0}, "between 1 ms"),
        ({"every": "5"}, "seconds or a timedelta"),
        ({"every": 5, "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 5, "catch_up": "some"}, "catch_up"),
        ({"every": 5, "delay": 3}, "unsupported enqueue options"),
    ],
)
def test_bad_declarations_raise_at_the_call_site_and_store_nothing(
    backend: Backend, clock: FakeClock, options: dict[str, object], match: str
) -> None:
    queue = queue_on(backend, clock)
    with pytest.raises(ScheduleError, match=match):
        queue.schedule("bad", "tick", **options)  # type: ignore[arg-type]
    assert queue.list_schedules() == []


def test_bad_enqueue_options_and_payloads_raise_too(backend: Backend, clock: FakeClock) -> None:
    queue = queue_on(backend, clock)
    with pytest.raises(ValueError, match="max_attempts"):
        queue.schedule("bad", "tick", every=5, max_attempts=0)
    with pytest.raises(TypeError):
        queue.schedule("bad", "tick", every=5, data={"x": object()})
    assert queue.list_schedules() == []


def test_a_ticks_job_takes_the_types_defaults_and_the_schedule_options_win(
    backend: Backend, clock: FakeClock
) -> None:
    queue = queue_on(backend, clock)
    queue.register("report", lambda job, ctx: None, max_attempts=7, priority=4)
    queue.schedule("nightly", "report", every=60, priority=1)
    clock.advance(60.25)
    queue.scheduler.run_once()
    (job,) = backend.list_jobs(type="report")
    assert (job.max_attempts, job.priority) == (7, 1)


def test_a_schedule_gives_its_ticks_jobs_a_time_limit(backend: Backend, clock: FakeClock) -> None:
    queue = queue_on(backend, clock)
    queue.schedule("sync", "sync-feed", every=60, timeout=30)
    with pytest.raises(ValueError, match="timeout"):
        queue.schedule("bad", "sync-feed", every=60, timeout=0)
    assert [s.name for s in queue.list_schedules()] == ["sync"]
    clock.advance(60.25)
    queue.scheduler.run_once()
    (job,) = backend.list_jobs(type="sync-feed")
    assert job.timeout == 30


def test_a_tick_whose_data_the_types_schema_refuses_enqueues_nothing(
    backend: Backend, clock: FakeClock
) -> None:
    pytest.importorskip("pydantic")

    @dataclass
    class Report:
        day: int

    queue = queue_on(backend, clock)
    queue.register("report", lambda job, ctx: None, schema=Report)
    queue.schedule("bad", "report", every=60, data={"day": "not a number"})
    clock.advance(60.25)
    queue.scheduler.run_once()  # logged, retried later; nothing stored
    assert backend.list_jobs(type="report") == []
