"""claim_or_enqueue / run_claimed: inline runs with follower draining."""

from __future__ import annotations

from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue, QueueShutdownError
from durabl.testing import FakeClock
from tests.conftest import make_mongomock_backend

PENDING = {"dedupe_key": "user:1", "dedupe_scope": "pending"}


@pytest.fixture
def q(clock: FakeClock) -> JobQueue:
    return JobQueue(make_mongomock_backend(clock), visibility_timeout=30)


def statuses(q: JobQueue) -> list[str]:
    return sorted(j.status for j in q.list_jobs())


def test_claim_or_enqueue_returns_a_claimed_handle(q: JobQueue) -> None:
    handle = q.claim_or_enqueue("t", {"v": 1}, **PENDING)
    assert handle is not None and handle.status == "active" and handle.attempts == 1
    seen: list[Any] = []
    q.run_claimed(handle, lambda job, ctx: seen.append(job.data))
    assert seen == [{"v": 1}] and statuses(q) == ["completed"]


def test_pending_scope_with_an_active_run_creates_one_follower(q: JobQueue) -> None:
    active = q.claim_or_enqueue("t", {"v": 1}, **PENDING)
    assert active is not None
    assert q.claim_or_enqueue("t", {"v": 2}, **PENDING) is None
    assert q.claim_or_enqueue("t", {"v": 3}, **PENDING) is None  # follower keeps first payload
    assert statuses(q) == ["active", "pending"]
    (follower,) = q.list_jobs(status="pending")
    assert follower.data == {"v": 2}


def test_latest_coalescing_replaces_only_the_follower_payload(q: JobQueue) -> None:
    active = q.claim_or_enqueue("t", {"v": 1}, coalesce="latest", **PENDING)
    assert active is not None
    q.claim_or_enqueue("t", {"v": 2}, coalesce="latest", **PENDING)
    q.claim_or_enqueue("t", {"v": 3}, coalesce="latest", **PENDING)
    (follower,) = q.list_jobs(status="pending")
    assert follower.data == {"v": 3}
    (running,) = q.list_jobs(status="active")
    assert running.data == {"v": 1}


def test_pending_active_scope_returns_none_without_a_follower(q: JobQueue) -> None:
    active = q.claim_or_enqueue("t", {"v": 1}, dedupe_key="k")
    assert active is not None
    assert q.claim_or_enqueue("t", {"v": 2}, dedupe_key="k") is None
    assert statuses(q) == ["active"]


def test_run_claimed_drains_followers_after_success(q: JobQueue) -> None:
    handle = q.claim_or_enqueue("t", {"v": 1}, coalesce="latest", **PENDING)
    assert handle is not None
    seen: list[int] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        seen.append(job.data["v"])
        if job.data["v"] == 1:  # a request arrives while the first run is going
            q.claim_or_enqueue("t", {"v": 2}, coalesce="latest", **PENDING)

    q.run_claimed(handle, handler)
    assert seen == [1, 2]
    assert statuses(q) == ["completed", "completed"]


def test_failure_with_a_follower_supersedes_runs_it_and_reraises(q: JobQueue) -> None:
    handle = q.claim_or_enqueue("t", {"v": 1}, **PENDING)
    assert handle is not None
    seen: list[int] = []
    boom = RuntimeError("first run failed")

    def handler(job: Job[Any], ctx: JobContext) -> None:
        seen.append(job.data["v"])
        if job.data["v"] == 1:
            q.claim_or_enqueue("t", {"v": 2}, **PENDING)
            raise boom

    with pytest.raises(RuntimeError) as info:
        q.run_claimed(handle, handler)
    assert info.value is boom  # the original error object
    assert seen == [1, 2]
    assert statuses(q) == ["completed", "superseded"]


def test_failure_without_a_follower_schedules_a_retry_and_reraises(q: JobQueue) -> None:
    handle = q.claim_or_enqueue("t", {"v": 1}, **PENDING)
    assert handle is not None
    with pytest.raises(ValueError):
        q.run_claimed(handle, lambda job, ctx: int("x"))
    assert statuses(q) == ["pending"]


def test_max_drains_bounds_the_extra_claims(q: JobQueue) -> None:
    handle = q.claim_or_enqueue("t", {"v": 0}, **PENDING)
    assert handle is not None
    seen: list[int] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        seen.append(job.data["v"])
        q.claim_or_enqueue("t", {"v": job.data["v"] + 1}, **PENDING)  # always a new follower

    q.run_claimed(handle, handler, max_drains=2)
    assert seen == [0, 1, 2]
    assert statuses(q) == ["completed", "completed", "completed", "pending"]


def test_max_drains_zero_disables_draining(q: JobQueue) -> None:
    handle = q.claim_or_enqueue("t", {"v": 0}, **PENDING)
    assert handle is not None
    q.run_claimed(
        handle,
        lambda job, ctx: q.claim_or_enqueue("t", {"v": 1}, **PENDING),
        max_drains=0,
    )
    assert statuses(q) == ["completed", "pending"]


def test_claim_or_enqueue_refuses_scheduling(q: JobQueue) -> None:
    with pytest.raises(ValueError, match="enqueue"):
        q.claim_or_enqueue("t", {}, delay=5)


def test_inline_calls_are_refused_after_shutdown_and_release_the_claim(q: JobQueue) -> None:
    handle = q.claim_or_enqueue("t", {"v": 1}, dedupe_key="k")
    assert handle is not None
    q.shutdown(1)
    with pytest.raises(QueueShutdownError):
        q.claim_or_enqueue("t", {"v": 2})
    with pytest.raises(QueueShutdownError):
        q.run_claimed(handle, lambda job, ctx: None)
    (job,) = q.list_jobs()
    assert job.status == "pending" and job.attempts == 0  # released, no attempt used


def test_events_report_each_outcome_of_an_inline_run(clock: FakeClock) -> None:
    from durabl import JobEvent

    events: list[JobEvent] = []
    q = JobQueue(make_mongomock_backend(clock), on_job_event=events.append)
    handle = q.claim_or_enqueue("t", {"v": 1}, **PENDING)
    assert handle is not None

    def handler(job: Job[Any], ctx: JobContext) -> None:
        if job.data["v"] == 1:
            q.claim_or_enqueue("t", {"v": 2}, **PENDING)
            raise RuntimeError("first run failed")

    with pytest.raises(RuntimeError):
        q.run_claimed(handle, handler)
    assert [e.kind for e in events] == [
        *("claimed", "started", "superseded"),
        *("claimed", "started", "completed"),
    ]
    assert events[2].job_id == handle.id and events[2].duration is not None
