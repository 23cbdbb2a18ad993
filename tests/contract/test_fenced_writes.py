"""Fenced writes: every write after a claim is checked against the claim token; terminal
writes never overwrite a terminal state; receipts make a repeated write report its first
result; unknown ids are ``not-found``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from bson import ObjectId

from durabl.model.job import JobResult
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, claim_one, enqueue_id, expire_leases, get

Write = Callable[[Backend, str, str, FakeClock], Any]

WRITES: dict[str, Write] = {
    "complete": lambda b, i, t, c: b.complete(i, t),
    "fail": lambda b, i, t, c: b.fail(i, t, "boom", retry_at=c.now()),
    "fail_fatal": lambda b, i, t, c: b.fail_fatal(i, t, "boom"),
    "release": lambda b, i, t, c: b.release(i, t),
    "snooze": lambda b, i, t, c: b.snooze(i, t, run_at=c.now()),
}


def unknown_ids(backend: Backend) -> list[str]:
    """Ids that name no job: garbage, and well-formed ids of every store's shape."""
    gone = enqueue_id(backend, data={"doomed": True})
    assert backend.delete(gone)
    return ["nope", "", str(ObjectId()), uuid.uuid4().hex, gone]


# -- stale tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(WRITES))
def test_write_with_a_stale_token_is_lease_lost_and_leaves_the_job_alone(
    backend: Backend, clock: FakeClock, op: str
) -> None:
    enqueue_id(backend, max_attempts=5)
    stale = claim_one(backend)
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1  # the lease is lost without any receipt
    current = claim_one(backend)
    before = get(backend, current.id)
    result = WRITES[op](backend, stale.id, stale.claim_token, clock)
    assert result == JobResult("lease-lost")
    assert result.terminal_status is None
    assert get(backend, current.id) == before
    assert current.complete() == "completed"


@pytest.mark.parametrize("op", sorted(WRITES))
def test_write_with_a_made_up_token_is_lease_lost(
    backend: Backend, clock: FakeClock, op: str
) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    before = get(backend, handle.id)
    assert WRITES[op](backend, handle.id, "not-the-token", clock) == JobResult("lease-lost")
    assert get(backend, handle.id) == before


@pytest.mark.parametrize("op", sorted(WRITES))
def test_write_to_a_pending_job_is_lease_lost(backend: Backend, clock: FakeClock, op: str) -> None:
    enqueue_id(backend, max_attempts=5)
    handle = claim_one(backend)
    assert handle.release() == "released"
    before = get(backend, handle.id)
    assert WRITES[op](backend, handle.id, "other-token", clock) == JobResult("lease-lost")
    assert get(backend, handle.id) == before


def test_heartbeat_with_a_stale_token_is_lease_lost(backend: Backend) -> None:
    enqueue_id(backend)
    stale = claim_one(backend)
    stale.release()
    current = claim_one(backend)
    assert backend.heartbeat(stale.id, stale.claim_token) == "lease-lost"
    assert current.heartbeat() == "applied"


def test_heartbeat_of_an_ended_or_unknown_job_is_lease_lost(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    handle.complete()
    assert handle.heartbeat() == "lease-lost"
    for job_id in unknown_ids(backend):
        assert backend.heartbeat(job_id, "token") == "lease-lost"


def test_heartbeat_renews_the_lease_instant(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    clock.advance(10)
    assert handle.heartbeat() == "applied"
    assert get(backend, handle.id).status == "active"


# -- terminal jobs ---------------------------------------------------------------------------


def end_job(backend: Backend, how: str) -> str:
    """A job ended ``completed``, ``failed`` or ``superseded``; returns its id."""
    if how == "superseded":
        enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", max_attempts=3)
        handle = claim_one(backend)
        enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
        assert handle.release() == "superseded"
        return handle.id
    enqueue_id(backend, max_attempts=3)
    handle = claim_one(backend)
    assert (handle.complete() if how == "completed" else handle.fail_fatal("x")) != "lease-lost"
    return handle.id


@pytest.mark.parametrize("terminal", ["completed", "failed", "superseded"])
@pytest.mark.parametrize("op", sorted(WRITES))
def test_write_to_a_terminal_job_is_already_terminal_with_its_status(
    backend: Backend, clock: FakeClock, op: str, terminal: str
) -> None:
    job_id = end_job(backend, terminal)
    before = get(backend, job_id)
    assert before.status == terminal
    result = WRITES[op](backend, job_id, "another-token", clock)
    assert result.status == "already-terminal"
    assert result.terminal_status == terminal
    assert get(backend, job_id) == before


# -- unknown ids -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(WRITES))
def test_write_to_an_unknown_id_is_not_found(backend: Backend, clock: FakeClock, op: str) -> None:
    for job_id in unknown_ids(backend):
        result = WRITES[op](backend, job_id, "token", clock)
        assert result == JobResult("not-found"), job_id
        assert result.terminal_status is None


def test_get_job_of_an_unknown_id_is_none(backend: Backend) -> None:
    for job_id in unknown_ids(backend):
        assert backend.get_job(job_id) is None


# -- receipts --------------------------------------------------------------------------------


def test_complete_twice_with_the_same_handle_reports_completed_twice(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.complete() == JobResult("completed")
    assert handle.complete() == JobResult("completed")
    assert get(backend, handle.id).status == "completed"


def test_fail_fatal_twice_reports_failed_terminal_twice(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.fail_fatal("bad") == JobResult("failed-terminal")
    assert handle.fail_fatal("bad") == JobResult("failed-terminal")


def test_fail_after_complete_with_the_same_token_is_already_terminal(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.complete() == "completed"
    result = handle.fail("late", retry_at=clock.now())
    assert result == JobResult("already-terminal", "completed")
    assert handle.fail_fatal("late") == JobResult("already-terminal", "completed")
    assert handle.release() == JobResult("already-terminal", "completed")
    job = get(backend, handle.id)
    assert (job.status, job.fail_reason, job.failure_kind) == ("completed", None, None)


def test_complete_after_fail_fatal_is_already_terminal_failed(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.fail_fatal("poison") == "failed-terminal"
    assert handle.complete() == JobResult("already-terminal", "failed")


def test_repeated_retry_scheduling_fail_reports_its_first_result(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, max_attempts=3)
    handle = claim_one(backend)
    assert handle.fail("flaky", retry_at=clock.now()) == "retry-scheduled"
    assert handle.fail("flaky", retry_at=clock.now()) == JobResult("retry-scheduled")
    job = get(backend, handle.id)
    assert (job.status, job.attempts) == ("pending", 1)


def test_repeated_release_reports_released(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.release() == "released"
    assert handle.release() == JobResult("released")
    assert get(backend, handle.id).attempts == 0  # refunded once, not twice


def test_receipt_survives_a_later_claim_of_the_same_job(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend, max_attempts=3)
    first = claim_one(backend)
    assert first.fail("flaky", retry_at=clock.now()) == "retry-scheduled"
    second = claim_one(backend)
    assert first.fail("flaky", retry_at=clock.now()) == JobResult("retry-scheduled")
    assert first.complete() == JobResult("lease-lost")
    assert second.complete() == "completed"
    assert first.fail("flaky", retry_at=clock.now()) == JobResult("retry-scheduled")
    assert first.complete() == JobResult("already-terminal", "completed")


def test_repeated_superseding_release_reports_superseded(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    handle = claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert handle.release() == "superseded"
    assert handle.release() == JobResult("superseded")
    assert handle.complete() == JobResult("already-terminal", "superseded")
