"""cancel(): a pending job ends ``cancelled`` at once; an active one is asked to stop through
its heartbeat, and ends ``cancelled`` however its run ends, unless it completed first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import pytest

from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, enqueue, enqueue_id, expire_leases, get


def test_cancel_pending_ends_it_at_once_and_frees_its_dedupe_slot(backend: Backend) -> None:
    job_id = enqueue_id(backend, dedupe_key="k")
    assert enqueue(backend, dedupe_key="k") is None
    assert backend.cancel(job_id, "not needed") == "cancelled"
    job = get(backend, job_id)
    assert (job.status, job.fail_reason, job.failure_kind) == ("cancelled", "not needed", None)
    assert backend.claim("t") == []
    assert enqueue(backend, dedupe_key="k") is not None  # the slot is free again


def test_cancel_without_reason_keeps_cancelled(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    assert backend.cancel(job_id) == "cancelled"
    assert get(backend, job_id).fail_reason == "cancelled"


def test_cancel_terminal_missing_or_twice_is_not_cancellable(backend: Backend) -> None:
    done = enqueue_id(backend)
    (handle,) = backend.claim("t")
    handle.complete()
    assert backend.cancel(done) == "not-cancellable"
    assert get(backend, done).status == "completed"
    assert backend.cancel("0123456789abcdef01234567") == "not-cancellable"
    assert backend.cancel("no such id") == "not-cancellable"
    pending = enqueue_id(backend)
    assert backend.cancel(pending) == "cancelled"
    assert backend.cancel(pending) == "not-cancellable"


def test_cancel_rejects_a_reason_that_is_not_text(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    with pytest.raises(TypeError):
        backend.cancel(job_id, 42)  # type: ignore[arg-type]
    assert get(backend, job_id).status == "pending"


def test_cancel_active_is_delivered_by_the_next_heartbeat(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    (handle,) = backend.claim("t", lease_owner="w")
    assert handle.heartbeat() == "applied"
    assert backend.cancel(job_id, "stop it") == "requested"
    assert backend.cancel(job_id) == "not-cancellable"  # already requested
    assert get(backend, job_id).status == "active"
    assert handle.heartbeat() == "cancel-requested"
    assert backend.cancel_run(job_id, handle.claim_token) == "cancelled"
    job = get(backend, job_id)
    assert (job.status, job.fail_reason, job.worker) == ("cancelled", "stop it", None)
    (attempt,) = job.attempt_history
    assert (attempt.outcome, attempt.worker, attempt.error) == ("cancelled", "w", "stop it")
    # A repeat answers from its receipt; another claim's token is a lost lease.
    assert backend.cancel_run(job_id, handle.claim_token) == "cancelled"


def test_completion_after_a_request_wins(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    (handle,) = backend.claim("t")
    assert backend.cancel(job_id) == "requested"
    assert handle.complete() == "completed"
    assert get(backend, job_id).status == "completed"


def test_a_failure_or_release_after_a_request_ends_cancelled(
    backend: Backend, clock: FakeClock
) -> None:
    failed = enqueue_id(backend, max_attempts=3)
    (handle,) = backend.claim("t")
    assert backend.cancel(failed) == "requested"
    assert handle.fail("E: boom", retry_at=clock.now()) == "cancelled"
    assert get(backend, failed).status == "cancelled"

    released = enqueue_id(backend)
    (handle,) = backend.claim("t")
    assert backend.cancel(released) == "requested"
    assert handle.release() == "cancelled"
    job = get(backend, released)
    assert (job.status, job.attempt_history[-1].outcome) == ("cancelled", "cancelled")


def test_reaper_cancels_a_requested_job_whose_worker_is_gone(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=5)
    backend.claim("t", lease_owner="dead")
    assert backend.cancel(job_id) == "requested"
    expire_leases(clock, backend)
    assert backend.recover_stuck_jobs(VT) == 1
    job = get(backend, job_id)
    assert (job.status, job.attempt_history[-1].outcome) == ("cancelled", "cancelled")


def test_reaper_cancels_a_requested_job_whose_last_attempt_was_lost(
    backend: Backend, clock: FakeClock
) -> None:
    # The cancel request wins over "no attempt left": the operator asked for it to stop,
    # and it did stop, so it ends cancelled (with the reason kept), not failed stalled.
    job_id = enqueue_id(backend, max_attempts=1)
    backend.claim("t", lease_owner="dead")
    assert backend.cancel(job_id, "not needed") == "requested"
    expire_leases(clock, backend)
    report = backend.reap(VT)
    assert (report.recovered, report.stalled, report.superseded) == (1, 0, 0)
    job = get(backend, job_id)
    assert (job.status, job.fail_reason, job.failure_kind) == ("cancelled", "not needed", None)
    (attempt,) = job.attempt_history
    assert (attempt.outcome, attempt.error) == ("cancelled", "not needed")


def test_cancelled_counts_and_lists(backend: Backend) -> None:
    ids = [enqueue_id(backend) for _ in range(3)]
    for job_id in ids[:2]:
        backend.cancel(job_id)
    assert backend.get_stats().cancelled == 2
    assert backend.get_stats("t").pending == 1
    assert {j.id for j in backend.list_jobs(status="cancelled")} == set(ids[:2])
    assert backend.count_jobs(status="cancelled") == 2
    assert backend.delete(ids[0]) is True
    assert backend.retry(ids[1]) is False


def race(first: Callable[[], object], second: Callable[[], object]) -> tuple[object, object]:
    """Run both at once (released together by a barrier); their results."""
    start = threading.Barrier(2)
    results: list[object] = [None, None]

    def run(n: int, fn: Callable[[], object]) -> None:
        start.wait()
        results[n] = fn()

    threads = [threading.Thread(target=run, args=(n, fn)) for n, fn in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results[0], results[1]


def test_cancel_racing_completion_has_exactly_one_outcome(backend: Backend) -> None:
    for _ in range(20):
        job_id = enqueue_id(backend)
        (handle,) = backend.claim("t")
        cancelled, completed = race(partial(backend.cancel, job_id), handle.complete)
        job = get(backend, job_id)
        assert completed == "completed"
        assert job.status == "completed"
        assert cancelled in ("requested", "not-cancellable")
        assert [a.outcome for a in job.attempt_history] == ["completed"]


def test_cancel_racing_a_claim_has_exactly_one_outcome(backend: Backend) -> None:
    for _ in range(20):
        job_id = enqueue_id(backend)
        cancelled, claimed = race(partial(backend.cancel, job_id), lambda: backend.claim("t"))
        assert isinstance(claimed, list)
        if cancelled == "cancelled":
            assert claimed == [] and get(backend, job_id).status == "cancelled"
        else:
            assert cancelled == "requested" and len(claimed) == 1
            assert claimed[0].heartbeat() == "cancel-requested"
            assert claimed[0].complete() == "completed"
