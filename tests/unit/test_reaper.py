"""The reaper returns jobs of dead workers to pending, or fails them ``stalled``."""

from __future__ import annotations

import mongomock
import pytest

from durabl import JobEvent, JobQueue, MongoJobQueue
from durabl.testing import FakeClock
from tests.conftest import make_mongomock_backend

VT = 30


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def q(clock: FakeClock, events: list[JobEvent]) -> JobQueue:
    queue = JobQueue(
        make_mongomock_backend(clock), visibility_timeout=VT, on_job_event=events.append
    )
    yield queue  # type: ignore[misc]
    queue.shutdown(2)


def expire(clock: FakeClock, q: JobQueue) -> None:
    clock.advance(VT + q.backend.clock_skew_allowance + 1)  # type: ignore[attr-defined]


def test_start_reaper_sweeps_at_once_and_reports_recovered(
    q: JobQueue, clock: FakeClock, events: list[JobEvent]
) -> None:
    q.enqueue("t", {})
    q.backend.claim("t")  # a worker claims it, then dies
    expire(clock, q)
    result = q.start_reaper(interval=3600)
    assert (result.status, result.recovered) == ("started", 1)
    (job,) = q.list_jobs()
    assert job.status == "pending" and job.attempts == 1  # the dead run counted
    recovered = [e for e in events if e.kind == "reaper-recovered"]
    assert recovered[-1].handled == 1 and recovered[-1].saturated is False
    assert q.start_reaper().status == "already-running"


def test_a_live_lease_is_left_alone(q: JobQueue, clock: FakeClock) -> None:
    q.enqueue("t", {})
    q.backend.claim("t")
    clock.advance(VT - 1)
    assert q.backend.recover_stuck_jobs(VT) == 0
    (job,) = q.list_jobs()
    assert job.status == "active"


def test_skew_allowance_delays_recovery(clock: FakeClock) -> None:
    backend = MongoJobQueue(
        mongomock.MongoClient(tz_aware=True)["t"], clock=clock, clock_skew_allowance=2
    )
    q = JobQueue(backend, visibility_timeout=VT)
    q.enqueue("t", {})
    backend.claim("t")
    clock.advance(VT + 1.5)  # past the timeout, inside the skew allowance
    assert backend.recover_stuck_jobs(VT) == 0
    clock.advance(1)
    assert backend.recover_stuck_jobs(VT) == 1


def test_last_attempt_fails_stalled(q: JobQueue, clock: FakeClock) -> None:
    q.enqueue("t", {}, max_attempts=1)
    q.backend.claim("t")
    expire(clock, q)
    report = q.backend.reap(VT)
    assert report.stalled == 1
    (job,) = q.list_failed(failure_kind="stalled")
    assert job.attempts == 1 and "lease expired" in (job.fail_reason or "")


def test_recovered_job_completes_exactly_once_afterwards(q: JobQueue, clock: FakeClock) -> None:
    runs: list[str] = []
    q.register("t", lambda job, ctx: runs.append(job.id))
    job_id = q.enqueue("t", {})
    (dead,) = q.backend.claim("t")
    expire(clock, q)
    assert q.backend.recover_stuck_jobs(VT) == 1
    assert q.run_pending() == 1
    assert runs == [job_id]
    assert dead.complete().status == "already-terminal"  # the dead run's late write is fenced
    assert q.get_stats().completed == 1


def test_reaper_reports_saturation_and_keeps_sweeping(q: JobQueue, clock: FakeClock) -> None:
    for n in range(5):
        q.enqueue("t", {"n": n})
    q.backend.claim("t", limit=5)
    expire(clock, q)
    first = q.backend.reap(VT, limit=2)
    assert first.handled == 2 and first.saturated
    assert q.backend.recover_stuck_jobs(VT) == 3


def test_reaper_supersedes_when_a_follower_holds_the_key(q: JobQueue, clock: FakeClock) -> None:
    q.enqueue("t", {"v": 1}, dedupe_key="k", dedupe_scope="pending")
    q.backend.claim("t")
    q.enqueue("t", {"v": 2}, dedupe_key="k", dedupe_scope="pending")  # the follower
    expire(clock, q)
    report = q.backend.reap(VT)
    assert report.superseded == 1
    assert {j.status for j in q.list_jobs()} == {"superseded", "pending"}


def test_many_reapers_are_safe(clock: FakeClock) -> None:
    backend = make_mongomock_backend(clock)
    first, second = (
        JobQueue(backend, visibility_timeout=VT),
        JobQueue(backend, visibility_timeout=VT),
    )
    for n in range(4):
        first.enqueue("t", {"n": n})
    backend.claim("t", limit=4)
    expire(clock, first)
    total = backend.recover_stuck_jobs(VT) + backend.recover_stuck_jobs(VT)
    assert total == 4
    assert second.get_stats().pending == 4


def test_reaper_error_is_an_event_and_start_reports_none(
    q: JobQueue, events: list[JobEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("store down")

    q.startup()
    monkeypatch.setattr(q.backend, "reap", broken)
    result = q.start_reaper(interval=3600)
    assert (result.status, result.recovered) == ("started", None)
    assert [e.kind for e in events] == ["reaper-error"]
    q.stop_reaper()
