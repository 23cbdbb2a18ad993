"""fail, fail_fatal and release: retry scheduling, terminal failure, refunded attempts,
and superseding a run whose pending follower already covers its work."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durabl.model.job import JobResult
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue, enqueue_id, get

# -- fail ------------------------------------------------------------------------------------


def test_fail_with_attempts_left_schedules_a_retry_at_retry_at(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=3)
    handle = claim_one(backend)
    clock.advance(2)
    retry_at = clock.now() + timedelta(seconds=45)
    assert backend.fail(job_id, handle.claim_token, "upstream 503", retry_at=retry_at) == JobResult(
        "retry-scheduled"
    )
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.run_at) == ("pending", 1, retry_at)
    assert (job.fail_reason, job.failure_kind) == ("upstream 503", None)
    assert job.updated_at == clock.now()


def test_retry_scheduled_job_waits_for_retry_at(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend, max_attempts=3)
    handle = claim_one(backend)
    handle.fail("later", retry_at=clock.now() + timedelta(seconds=10))
    assert backend.claim("t") == []
    clock.advance(10)
    again = claim_one(backend)
    assert (again.id, again.attempts) == (handle.id, 2)


def test_handle_fail_without_retry_at_uses_the_job_backoff(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, max_attempts=3, backoff="fixed", backoff_delay=7)
    handle = claim_one(backend)
    assert handle.fail("x") == "retry-scheduled"
    assert get(backend, handle.id).run_at == clock.now() + timedelta(seconds=7)


def test_fail_at_max_attempts_is_failed_terminal_retries_exhausted(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=2)
    assert claim_one(backend).fail("one", retry_at=clock.now()) == "retry-scheduled"
    clock.advance(5)
    assert claim_one(backend).fail("two", retry_at=clock.now()) == JobResult("failed-terminal")
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.failure_kind) == ("failed", 2, "retries-exhausted")
    assert job.fail_reason == "two"
    assert backend.claim("t") == []


def test_fail_with_one_attempt_is_terminal_at_once(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=1, dedupe_key="k")
    assert claim_one(backend).fail("x", retry_at=clock.now()) == "failed-terminal"
    assert get(backend, job_id).failure_kind == "retries-exhausted"
    assert enqueue(backend, dedupe_key="k") is not None  # the key is free


def test_fail_keeps_the_dedupe_slot_through_the_retry(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend, dedupe_key="k", max_attempts=3)
    claim_one(backend).fail("x", retry_at=clock.now())
    assert enqueue(backend, dedupe_key="k") is None


def test_fail_of_a_pending_scope_run_goes_back_to_pending(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", max_attempts=3)
    handle = claim_one(backend)
    assert handle.fail("x", retry_at=clock.now()) == "retry-scheduled"
    assert enqueue(backend, dedupe_key="k", dedupe_scope="pending") is None
    again = claim_one(backend)
    assert again.id == handle.id


def test_fail_with_a_pending_follower_holding_the_key_is_superseded(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", max_attempts=3)
    handle = claim_one(backend)
    follower = enqueue_id(backend, data={"v": 2}, dedupe_key="k", dedupe_scope="pending")
    assert handle.fail("x", retry_at=clock.now()) == JobResult("superseded")
    old = get(backend, handle.id)
    assert old.status == "superseded"
    assert old.failure_kind is None
    assert get(backend, follower).status == "pending"
    assert backend.count_jobs(status="pending") == 1
    assert claim_one(backend).id == follower  # the key is no longer running


def test_a_failed_run_superseded_by_a_follower_keeps_the_failure_in_its_attempt(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", max_attempts=3)
    handle = claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert handle.fail("ValueError: upstream 503", retry_at=clock.now()) == "superseded"
    job = get(backend, handle.id)
    (attempt,) = job.attempt_history
    assert (attempt.outcome, attempt.error) == ("superseded", "ValueError: upstream 503")
    assert job.fail_reason == "ValueError: upstream 503"  # the last failure's description


def test_fail_at_max_attempts_with_a_follower_is_still_failed_terminal(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", max_attempts=1)
    handle = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert handle.fail("x", retry_at=clock.now()) == "failed-terminal"
    assert get(backend, handle.id).failure_kind == "retries-exhausted"
    assert claim_one(backend).id == follower


def test_fail_fatal_is_terminal_with_kind_fatal_whatever_attempts_remain(
    backend: Backend,
) -> None:
    job_id = enqueue_id(backend, max_attempts=10, dedupe_key="k")
    handle = claim_one(backend)
    assert handle.fail_fatal("poison payload") == JobResult("failed-terminal")
    job = get(backend, job_id)
    assert (job.status, job.failure_kind, job.fail_reason, job.attempts) == (
        "failed",
        "fatal",
        "poison payload",
        1,
    )
    assert enqueue(backend, dedupe_key="k") is not None


def test_fail_fatal_with_a_follower_is_failed_terminal(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    handle = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert handle.fail_fatal("poison") == "failed-terminal"
    assert claim_one(backend).id == follower


def test_long_fail_reason_is_clipped(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    handle.fail_fatal("x" * 100_000)
    reason = get(backend, handle.id).fail_reason
    assert reason is not None
    assert 1000 < len(reason.encode()) <= 16 * 1024


# -- release ---------------------------------------------------------------------------------


def test_release_returns_the_job_to_pending_and_refunds_the_attempt(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend)
    original = get(backend, job_id)
    handle = claim_one(backend)
    clock.advance(4)
    assert handle.release() == JobResult("released")
    job = get(backend, job_id)
    assert (job.status, job.attempts) == ("pending", 0)
    assert job.run_at == original.run_at
    assert job.updated_at == clock.now()
    assert job.fail_reason is None


def test_released_job_keeps_its_place_in_line(backend: Backend, clock: FakeClock) -> None:
    first = enqueue_id(backend)
    clock.advance(1)
    second = enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.id == first
    clock.advance(1)
    handle.release()
    assert [h.id for h in backend.claim("t", limit=2)] == [first, second]


def test_release_of_a_retried_job_keeps_the_earlier_attempts(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, max_attempts=3)
    claim_one(backend).fail("x", retry_at=clock.now())
    handle = claim_one(backend)
    assert handle.attempts == 2
    handle.release()
    assert get(backend, handle.id).attempts == 1


def test_release_at_the_last_attempt_does_not_use_it_up(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend, max_attempts=1)
    claim_one(backend).release()
    assert claim_one(backend).fail("x", retry_at=clock.now()) == "failed-terminal"


def test_release_keeps_the_dedupe_slot(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k")
    claim_one(backend).release()
    assert enqueue(backend, dedupe_key="k") is None


def test_release_with_a_pending_follower_is_superseded(backend: Backend) -> None:
    enqueue_id(backend, data={"v": 1}, dedupe_key="k", dedupe_scope="pending")
    handle = claim_one(backend)
    follower = enqueue_id(backend, data={"v": 2}, dedupe_key="k", dedupe_scope="pending")
    assert handle.release() == JobResult("superseded")
    assert get(backend, handle.id).status == "superseded"
    (next_run,) = backend.claim("t", limit=2)
    assert (next_run.id, next_run.data) == (follower, {"v": 2})


def test_release_of_a_pending_scope_run_without_follower_is_released(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    handle = claim_one(backend)
    assert handle.release() == "released"
    assert enqueue(backend, dedupe_key="k", dedupe_scope="pending") is None
    assert claim_one(backend).id == handle.id


@pytest.mark.parametrize("timeout", [None, 1.0])
def test_release_accepts_a_timeout(backend: Backend, timeout: float | None) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    assert backend.release(handle.id, handle.claim_token, timeout=timeout) == "released"
