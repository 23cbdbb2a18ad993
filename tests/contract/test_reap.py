"""Reaping: a lease not renewed within the visibility timeout is recovered (pending again,
the dead run counted), failed ``stalled`` at max attempts, or superseded by a follower."""

from __future__ import annotations

from datetime import timedelta

from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, claim_one, enqueue, enqueue_id, expire_leases, get


def test_expired_lease_goes_back_to_pending_with_the_attempt_counted(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=3)
    handle = claim_one(backend)
    expire_leases(clock, backend)
    report = backend.reap(VT)
    assert (report.recovered, report.stalled, report.superseded) == (1, 0, 0)
    assert report.handled == 1
    assert report.saturated is False
    assert report.job_ids == (job_id,)
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.run_at) == ("pending", 1, clock.now())
    assert handle.complete() == "lease-lost"
    again = claim_one(backend)
    assert (again.id, again.attempts) == (job_id, 2)


def test_expired_lease_at_max_attempts_fails_stalled(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=1, dedupe_key="k")
    claim_one(backend)
    expire_leases(clock, backend)
    report = backend.reap(VT)
    assert (report.recovered, report.stalled, report.superseded) == (0, 1, 0)
    job = get(backend, job_id)
    assert (job.status, job.failure_kind, job.attempts) == ("failed", "stalled", 1)
    assert job.fail_reason
    assert enqueue(backend, dedupe_key="k") is not None  # the key is free


def test_expired_lease_with_a_pending_follower_is_superseded(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", max_attempts=3)
    handle = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    expire_leases(clock, backend)
    report = backend.reap(VT)
    assert (report.recovered, report.stalled, report.superseded) == (0, 0, 1)
    assert get(backend, handle.id).status == "superseded"
    assert handle.complete().status == "already-terminal"
    assert claim_one(backend).id == follower


def test_expired_lease_at_max_attempts_with_a_follower_fails_stalled(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", max_attempts=1)
    handle = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    expire_leases(clock, backend)
    assert backend.reap(VT).stalled == 1
    assert get(backend, handle.id).failure_kind == "stalled"
    assert claim_one(backend).id == follower


def test_live_lease_is_left_alone(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend)
    claim_one(backend)
    clock.advance(VT - 1)
    report = backend.reap(VT)
    assert report.handled == 0
    assert report.job_ids == ()
    assert get(backend, job_id).status == "active"


def test_heartbeat_keeps_a_lease_alive(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    for _ in range(4):
        clock.advance(VT * 0.75)
        assert handle.heartbeat() == "applied"
    assert backend.reap(VT).handled == 0
    assert get(backend, job_id).status == "active"
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1


def test_reap_touches_only_expired_leases(backend: Backend, clock: FakeClock) -> None:
    old = enqueue_id(backend, data={"n": 1})
    claim_one(backend)
    expire_leases(clock, backend)
    young = enqueue_id(backend, data={"n": 2})
    claim_one(backend)
    waiting = enqueue_id(backend, data={"n": 3})
    report = backend.reap(VT)
    assert report.job_ids == (old,)
    assert [get(backend, i).status for i in (old, young, waiting)] == [
        "pending",
        "active",
        "pending",
    ]


def test_reap_leaves_pending_and_terminal_jobs_alone(backend: Backend, clock: FakeClock) -> None:
    done = enqueue_id(backend)
    claim_one(backend).complete()
    waiting = enqueue_id(backend, run_at=clock.now() + timedelta(hours=1))
    expire_leases(clock, backend, VT * 10)
    assert backend.reap(VT).handled == 0
    assert get(backend, done).status == "completed"
    assert get(backend, waiting).status == "pending"


def test_reap_respects_its_limit_and_reports_saturation(backend: Backend, clock: FakeClock) -> None:
    for n in range(3):
        enqueue_id(backend, data={"n": n})
    backend.claim("t", limit=3)
    expire_leases(clock, backend)
    first = backend.reap(VT, limit=2)
    assert (first.handled, first.saturated) == (2, True)
    second = backend.reap(VT, limit=2)
    assert (second.handled, second.saturated) == (1, False)
    assert backend.count_jobs(status="pending") == 3


def test_reap_takes_the_oldest_leases_first(backend: Backend, clock: FakeClock) -> None:
    oldest = enqueue_id(backend, data={"n": 1}, priority=5)
    claim_one(backend)
    clock.advance(1)
    enqueue_id(backend, data={"n": 2})
    claim_one(backend)
    expire_leases(clock, backend)
    assert backend.reap(VT, limit=1).job_ids == (oldest,)


def test_recover_stuck_jobs_sweeps_everything_and_counts_it(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, max_attempts=3)
    enqueue_id(backend, max_attempts=1)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    backend.claim("t", limit=3)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    expire_leases(clock, backend)
    assert backend.recover_stuck_jobs(VT) == 3
    assert backend.count_jobs(status="active") == 0
    assert backend.count_jobs(status="failed", failure_kind="stalled") == 1
    assert backend.count_jobs(status="superseded") == 1
    assert backend.recover_stuck_jobs(VT) == 0


def test_reaped_job_keeps_its_dedupe_slot(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend, dedupe_key="k")
    claim_one(backend)
    expire_leases(clock, backend)
    backend.reap(VT)
    assert enqueue(backend, dedupe_key="k") is None


def test_reap_after_every_attempt_ends_stalled(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=2)
    claim_one(backend)
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1
    claim_one(backend)
    expire_leases(clock, backend)
    assert backend.reap(VT).stalled == 1
    job = get(backend, job_id)
    assert (job.status, job.failure_kind, job.attempts) == ("failed", "stalled", 2)
