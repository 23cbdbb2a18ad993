"""Claims read ahead of a free worker: reaped unstarted, they keep their attempt."""

from __future__ import annotations

from durabl.model.rules import UNSTARTED_REAP_LIMIT
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, enqueue_id, expire_leases, get


def claim(backend: Backend, limit: int, starting: int) -> list[str]:
    handles = backend.claim("t", limit=limit, lease_owner="contract", starting=starting)
    return [h.id for h in handles]


def test_claim_returns_the_starting_jobs_first_in_claim_order(
    backend: Backend, clock: FakeClock
) -> None:
    ids = [enqueue_id(backend, data={"n": n}, priority=n) for n in range(5)]
    assert claim(backend, 5, 2) == ids


def test_a_read_ahead_claim_reaped_before_its_start_keeps_its_attempt(
    backend: Backend, clock: FakeClock
) -> None:
    first, ahead = enqueue_id(backend, max_attempts=1), enqueue_id(backend, max_attempts=1)
    clock.advance(0.01)
    assert claim(backend, 2, 1) == [first, ahead]
    expire_leases(clock, backend)
    report = backend.reap(VT)
    assert (report.recovered, report.stalled) == (1, 1)
    started = get(backend, first)
    assert (started.status, started.failure_kind) == ("failed", "stalled")
    never_ran = get(backend, ahead)
    assert (never_ran.status, never_ran.attempts) == ("pending", 0)


def test_a_read_ahead_claim_whose_start_was_recorded_is_charged(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, max_attempts=1)
    (handle,) = backend.claim("t", limit=1, lease_owner="contract", starting=0)
    backend.mark_started([(handle.id, handle.claim_token)])
    expire_leases(clock, backend)
    assert backend.reap(VT).stalled == 1
    assert get(backend, handle.id).failure_kind == "stalled"


def test_mark_started_is_fenced_on_the_claim_token(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=1)
    (handle,) = backend.claim("t", limit=1, lease_owner="contract", starting=0)
    backend.mark_started([(job_id, "not-the-token")])  # nothing happens
    expire_leases(clock, backend)
    backend.reap(VT)
    assert (get(backend, job_id).status, get(backend, job_id).attempts) == ("pending", 0)
    assert handle.claim_token


def test_a_job_reaped_unstarted_again_and_again_is_charged_at_last(
    backend: Backend, clock: FakeClock
) -> None:
    # A job that kills its process as it starts, before the start is recorded, must not
    # loop forever on refunds.
    job_id = enqueue_id(backend, max_attempts=1)
    for _ in range(UNSTARTED_REAP_LIMIT):
        assert claim(backend, 1, 0) == [job_id]
        expire_leases(clock, backend)
        backend.reap(VT)
        assert get(backend, job_id).status == "pending"
    assert claim(backend, 1, 0) == [job_id]
    expire_leases(clock, backend)
    backend.reap(VT)
    assert get(backend, job_id).failure_kind == "stalled"


def test_a_released_read_ahead_claim_uses_no_attempt(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=1)
    (handle,) = backend.claim("t", limit=1, lease_owner="contract", starting=0)
    assert backend.release(handle.id, handle.claim_token).status == "released"
    job = get(backend, job_id)
    assert (job.status, job.attempts) == ("pending", 0)
    (again,) = backend.claim("t", limit=1, lease_owner="contract")
    assert backend.complete(again.id, again.claim_token).status == "completed"
