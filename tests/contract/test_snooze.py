"""``raise durabl.Snooze(seconds)`` in a handler, on every store: the job is pending again
``seconds`` later, its attempt is not used, its history says ``snoozed``; the write is
fenced on the claim like any other ending write."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import durabl
from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.model.job import JobResult
from durabl.stores.base import Backend
from durabl.testing import FakeClock, wait_until
from tests.conftest import BACKENDS, cleanup_backend, make_backend
from tests.contract.support import VT, claim_one, enqueue_id, expire_leases, get


def snoozing(seconds: Any) -> Any:
    def handler(job: Job[Any], ctx: JobContext) -> None:
        ctx.log("not yet")
        raise durabl.Snooze(seconds)

    return handler


def test_a_snoozed_job_is_pending_again_later_without_using_its_attempt(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    events: list[JobEvent] = []
    queue.add_event_sink(events.append, kinds={"snoozed", "failed", "completed"})
    job_id = enqueue_id(backend, max_attempts=1)
    queue.register("t", snoozing(90))
    snoozed_at = backend.now()
    assert queue.run_pending("t") == 1
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.max_attempts) == ("pending", 0, 1)
    assert abs((job.run_at - (snoozed_at + timedelta(seconds=90))).total_seconds()) < 1
    assert job.failure_kind is None and job.fail_reason is None
    assert [(a.number, a.outcome, a.error) for a in job.attempt_history] == [(1, "snoozed", None)]
    assert [entry.message for entry in job.logs] == ["not yet"]
    assert [(e.kind, e.job_id, e.extra["seconds"]) for e in events] == [("snoozed", job_id, 90.0)]
    assert queue.run_pending("t") == 0  # not due yet


def test_a_snoozed_job_runs_again_when_due_and_can_complete(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    runs: list[int] = []

    def handler(job: Job[Any], ctx: JobContext) -> str:
        runs.append(job.attempts)
        if len(runs) < 3:
            raise durabl.Snooze(timedelta(seconds=5))
        return "done"

    job_id = enqueue_id(backend, max_attempts=1)  # snoozes never use the only attempt
    queue.register("t", handler)
    for _ in range(3):
        assert queue.run_pending("t") == 1
        clock.advance(6)
    job = get(backend, job_id)
    assert (job.status, job.result, job.attempts) == ("completed", "done", 1)
    assert runs == [1, 1, 1]
    outcomes = [a.outcome for a in job.attempt_history]
    assert outcomes == ["snoozed", "snoozed", "completed"]


def test_snooze_zero_makes_the_job_due_at_once(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend)
    queue.register("t", snoozing(0))
    assert queue.run_pending("t", limit=1) == 1
    job = get(backend, job_id)
    assert (job.status, job.attempts) == ("pending", 0)
    assert job.run_at <= backend.now()


def test_a_stale_claims_snooze_is_fenced_and_changes_nothing(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, max_attempts=5)
    stale = claim_one(backend)
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1
    current = claim_one(backend)
    before = get(backend, current.id)
    result = backend.snooze(stale.id, stale.claim_token, run_at=backend.now() + timedelta(60))
    assert result == JobResult("lease-lost")
    assert get(backend, current.id) == before
    assert current.complete() == "completed"


def test_a_snooze_repeated_after_a_lost_reply_reports_its_first_result(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    later = backend.now() + timedelta(seconds=30)
    assert backend.snooze(job_id, handle.claim_token, run_at=later) == "released"
    assert backend.snooze(job_id, handle.claim_token, run_at=later) == "released"
    job = get(backend, job_id)
    assert [a.outcome for a in job.attempt_history] == ["snoozed"]


def test_snoozing_a_job_whose_cancellation_was_requested_cancels_it(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    assert backend.cancel(job_id) == "requested"
    result = backend.snooze(job_id, handle.claim_token, run_at=backend.now() + timedelta(60))
    assert result == "cancelled"
    assert get(backend, job_id).status == "cancelled"


@pytest.mark.parametrize("seconds", [-1, float("inf"), float("nan"), "5", None, True])
def test_a_bad_snooze_fails_the_attempt_with_a_clear_error(
    backend: Backend, queue: JobQueue, clock: FakeClock, seconds: Any
) -> None:
    job_id = enqueue_id(backend, max_attempts=3)
    queue.register("t", snoozing(seconds))
    assert queue.run_pending("t", limit=1) == 1
    job = get(backend, job_id)
    assert (job.status, job.attempts) == ("pending", 1)  # an ordinary failed attempt
    assert job.fail_reason is not None and "Snooze seconds" in job.fail_reason
    assert [a.outcome for a in job.attempt_history] == ["retry-scheduled"]


@pytest.fixture(params=BACKENDS)
def live(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Every store on the real clock, for a worker pool."""
    store = make_backend(request.param)
    store.startup()
    yield store
    cleanup_backend(store)


def test_a_pool_snoozes_through_its_completer_and_runs_the_job_again(live: Any) -> None:
    events: list[JobEvent] = []
    queue = JobQueue(live, visibility_timeout=30, on_job_event=events.append)
    runs: list[int] = []

    def handler(job: Job[Any], ctx: JobContext) -> str:
        runs.append(job.attempts)
        if len(runs) == 1:
            raise durabl.Snooze(0.2)
        return "done"

    try:
        job_id = queue.enqueue("t", {}, max_attempts=1)
        assert job_id is not None
        queue.process("t", handler, poll_interval=0.05, heartbeat_interval=0.2)
        assert wait_until(lambda: queue.get_job(job_id).status == "completed", timeout=15)
    finally:
        queue.shutdown(timeout=5)
    job = queue.get_job(job_id)
    assert job is not None
    assert [a.outcome for a in job.attempt_history] == ["snoozed", "completed"]
    assert (job.attempts, runs) == (1, [1, 1])
    kinds = [e.kind for e in events if e.kind in ("snoozed", "completed", "failed")]
    assert kinds == ["snoozed", "completed"]
