"""claim_or_enqueue: create the job already claimed when its key allows a run now; else a
follower (pending scope), a coalesced payload, or nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from durabl import DedupeScopeConflictError
from durabl.model.options import build_new_job
from durabl.stores.base import Backend, InlineClaimResult
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue, enqueue_id, get


def inline(backend: Backend, data: Any = None, **options: Any) -> InlineClaimResult:
    new = build_new_job("t", {} if data is None else data, now=backend.now(), **options)
    return backend.claim_or_enqueue(new, "inline-owner")


def test_without_a_key_the_job_is_created_claimed(backend: Backend, clock: FakeClock) -> None:
    result = inline(backend, {"n": 1}, max_attempts=4, priority=2)
    handle = result.handle
    assert handle is not None
    assert (result.enqueued_id, result.coalesced) == (None, False)
    assert (handle.status, handle.attempts, handle.max_attempts, handle.data) == (
        "active",
        1,
        4,
        {"n": 1},
    )
    stored = get(backend, handle.id)
    assert (stored.status, stored.attempts, stored.priority) == ("active", 1, 2)
    assert stored.created_at == clock.now()
    assert backend.claim("t") == []
    assert handle.complete() == "completed"


def test_inline_claim_gets_a_fresh_token_each_time(backend: Backend) -> None:
    first, second = inline(backend).handle, inline(backend).handle
    assert first is not None and second is not None
    assert first.id != second.id
    assert first.claim_token and first.claim_token != second.claim_token


def test_inline_claim_has_a_lease_the_reaper_can_recover(
    backend: Backend, clock: FakeClock
) -> None:
    handle = inline(backend, max_attempts=2).handle
    assert handle is not None
    clock.advance(1000)
    assert backend.recover_stuck_jobs(30) == 1
    assert get(backend, handle.id).status == "pending"
    assert handle.complete() == "lease-lost"


def test_inline_handle_instants_have_store_precision(backend: Backend, clock: FakeClock) -> None:
    clock.advance(0.000777)
    run_at = datetime(2029, 12, 31, 23, 0, 0, 123456, tzinfo=timezone.utc)
    handle = inline(backend, run_at=run_at).handle
    assert handle is not None
    stored = get(backend, handle.id)
    assert handle.run_at == stored.run_at == run_at.replace(microsecond=123000)
    assert handle.created_at == stored.created_at


@pytest.mark.parametrize("scope", ["pending+active", "pending"])
def test_a_free_key_is_claimed_inline(backend: Backend, scope: str) -> None:
    result = inline(backend, dedupe_key="k", dedupe_scope=scope)
    assert result.handle is not None
    assert result.handle.dedupe_key == "k"
    assert get(backend, result.handle.id).status == "active"
    assert backend.has_outstanding("t", "k") is True


def test_pending_active_key_held_by_a_pending_job_returns_nothing(backend: Backend) -> None:
    holder = enqueue_id(backend, data={"v": 1}, dedupe_key="k")
    result = inline(backend, {"v": 2}, dedupe_key="k")
    assert (result.handle, result.enqueued_id, result.coalesced) == (None, None, False)
    assert get(backend, holder).data == {"v": 1}
    assert backend.count_jobs() == 1


def test_pending_active_key_held_by_a_pending_job_coalesces_latest(backend: Backend) -> None:
    holder = enqueue_id(backend, data={"v": 1}, dedupe_key="k")
    result = inline(backend, {"v": 2}, dedupe_key="k", coalesce="latest")
    assert (result.handle, result.enqueued_id, result.coalesced) == (None, None, True)
    assert get(backend, holder).data == {"v": 2}


def test_pending_active_key_held_by_an_active_run_creates_no_follower(backend: Backend) -> None:
    active = enqueue_id(backend, data={"v": 1}, dedupe_key="k")
    claim_one(backend)
    result = inline(backend, {"v": 2}, dedupe_key="k", coalesce="latest")
    assert (result.handle, result.enqueued_id, result.coalesced) == (None, None, False)
    assert get(backend, active).data == {"v": 1}
    assert backend.count_jobs() == 1


def test_pending_key_with_an_active_run_creates_one_follower(backend: Backend) -> None:
    enqueue_id(backend, data={"v": 1}, dedupe_key="k", dedupe_scope="pending")
    running = claim_one(backend)
    result = inline(backend, {"v": 2}, dedupe_key="k", dedupe_scope="pending")
    assert result.handle is None
    assert result.enqueued_id is not None
    follower = get(backend, result.enqueued_id)
    assert (follower.status, follower.attempts, follower.data) == ("pending", 0, {"v": 2})
    again = inline(backend, {"v": 3}, dedupe_key="k", dedupe_scope="pending")
    assert (again.handle, again.enqueued_id, again.coalesced) == (None, None, False)
    assert get(backend, result.enqueued_id).data == {"v": 2}
    assert get(backend, running.id).data == {"v": 1}


def test_pending_key_with_a_follower_coalesces_latest_into_it(backend: Backend) -> None:
    enqueue_id(backend, data={"v": 1}, dedupe_key="k", dedupe_scope="pending")
    running = claim_one(backend)
    follower = enqueue_id(backend, data={"v": 2}, dedupe_key="k", dedupe_scope="pending")
    result = inline(backend, {"v": 3}, dedupe_key="k", dedupe_scope="pending", coalesce="latest")
    assert (result.handle, result.enqueued_id, result.coalesced) == (None, None, True)
    assert get(backend, follower).data == {"v": 3}
    assert get(backend, running.id).data == {"v": 1}


def test_pending_key_held_by_a_waiting_job_returns_nothing(backend: Backend) -> None:
    waiting = enqueue_id(backend, data={"v": 1}, dedupe_key="k", dedupe_scope="pending")
    result = inline(backend, {"v": 2}, dedupe_key="k", dedupe_scope="pending")
    assert (result.handle, result.enqueued_id) == (None, None)
    assert get(backend, waiting).status == "pending"
    assert backend.count_jobs() == 1


@pytest.mark.parametrize(
    ("live_scope", "other_scope"),
    [("pending+active", "pending"), ("pending", "pending+active")],
)
@pytest.mark.parametrize("live_status", ["pending", "active"])
def test_inline_claim_under_the_other_scope_raises_and_stores_nothing(
    backend: Backend, live_scope: str, other_scope: str, live_status: str
) -> None:
    live = enqueue_id(backend, dedupe_key="k", dedupe_scope=live_scope)
    if live_status == "active":
        claim_one(backend)
    with pytest.raises(DedupeScopeConflictError):
        inline(backend, dedupe_key="k", dedupe_scope=other_scope)
    assert [j.id for j in backend.list_jobs()] == [live]
    assert get(backend, live).status == live_status


def test_inline_claim_is_an_attempt_like_any_claim(backend: Backend, clock: FakeClock) -> None:
    handle = inline(backend, max_attempts=1).handle
    assert handle is not None
    assert handle.fail("x", retry_at=clock.now()) == "failed-terminal"
    assert get(backend, handle.id).failure_kind == "retries-exhausted"


def test_inline_claim_of_a_future_job_still_runs_now(backend: Backend, clock: FakeClock) -> None:
    result = inline(backend, run_at=clock.now() + timedelta(hours=1))
    assert result.handle is not None
    assert get(backend, result.handle.id).status == "active"


def test_inline_claim_frees_its_key_when_it_ends(backend: Backend) -> None:
    handle = inline(backend, dedupe_key="k").handle
    assert handle is not None
    assert enqueue(backend, dedupe_key="k") is None
    assert handle.complete() == "completed"
    assert enqueue(backend, dedupe_key="k") is not None
