"""Enqueue and dedupe: what a store accepts, which dedupe slot each scope takes and when it
is free again, scope conflicts, and latest-payload coalescing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durabl import DedupeScopeConflictError
from durabl.model.options import build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue, enqueue_id, get

# -- plain enqueue ---------------------------------------------------------------------------


def test_enqueue_stores_a_pending_job_with_every_option(backend: Backend, clock: FakeClock) -> None:
    run_at = clock.now() + timedelta(seconds=90)
    job_id = enqueue_id(
        backend,
        "email",
        {"to": "a@example.com"},
        priority=7,
        run_at=run_at,
        max_attempts=5,
        dedupe_key="email:a",
        dedupe_scope="pending",
        backoff="fixed",
        backoff_delay=4.0,
        backoff_max_delay=40.0,
    )
    job = get(backend, job_id)
    assert job.id == job_id
    assert (job.type, job.data, job.status) == ("email", {"to": "a@example.com"}, "pending")
    assert (job.priority, job.run_at, job.attempts, job.max_attempts) == (7, run_at, 0, 5)
    assert (job.dedupe_key, job.dedupe_scope) == ("email:a", "pending")
    assert (job.backoff, job.backoff_delay, job.backoff_max_delay) == ("fixed", 4.0, 40.0)
    assert job.created_at == job.updated_at == clock.now()
    assert (job.fail_reason, job.failure_kind, job.logs) == (None, None, ())


def test_enqueue_without_run_at_is_due_at_the_store_clock(
    backend: Backend, clock: FakeClock
) -> None:
    job = get(backend, enqueue_id(backend))
    assert job.run_at == clock.now()
    assert job.run_at.tzinfo is not None and job.run_at.utcoffset() == timedelta(0)


def test_enqueue_with_delay_schedules_relative_to_now(backend: Backend, clock: FakeClock) -> None:
    job = get(backend, enqueue_id(backend, delay=12.5))
    assert job.run_at == clock.now() + timedelta(seconds=12.5)


def test_job_without_dedupe_key_has_no_scope(backend: Backend) -> None:
    job = get(backend, enqueue_id(backend))
    assert (job.dedupe_key, job.dedupe_scope) == (None, None)


def test_jobs_without_dedupe_key_never_exclude_each_other(backend: Backend) -> None:
    ids = {enqueue_id(backend, data={"n": n}) for n in range(4)}
    assert len(ids) == 4
    assert backend.count_jobs(status="pending") == 4


def test_enqueue_returns_distinct_string_ids(backend: Backend) -> None:
    first, second = enqueue_id(backend), enqueue_id(backend)
    assert isinstance(first, str) and isinstance(second, str)
    assert first != second


# -- dedupe scope pending+active -------------------------------------------------------------


def test_pending_active_key_refuses_a_second_job_while_pending(backend: Backend) -> None:
    first = enqueue_id(backend, dedupe_key="k")
    assert enqueue(backend, dedupe_key="k") is None
    assert [j.id for j in backend.list_jobs()] == [first]


def test_pending_active_key_refuses_a_second_job_while_active(backend: Backend) -> None:
    first = enqueue_id(backend, dedupe_key="k")
    claim_one(backend)
    assert enqueue(backend, dedupe_key="k") is None
    assert [j.id for j in backend.list_jobs()] == [first]


@pytest.mark.parametrize("end", ["complete", "fail_fatal", "fail_exhausted"])
def test_pending_active_key_is_free_again_after_the_job_ends(backend: Backend, end: str) -> None:
    enqueue_id(backend, dedupe_key="k", max_attempts=1)
    handle = claim_one(backend)
    if end == "complete":
        assert handle.complete() == "completed"
    elif end == "fail_fatal":
        assert handle.fail_fatal("no") == "failed-terminal"
    else:
        assert handle.fail("no") == "failed-terminal"
    assert enqueue(backend, dedupe_key="k") is not None


def test_dedupe_key_spans_job_types(backend: Backend) -> None:
    enqueue_id(backend, "a", dedupe_key="shared")
    assert enqueue(backend, "b", dedupe_key="shared") is None
    assert backend.count_jobs() == 1


def test_dedupe_key_spans_job_types_while_active(backend: Backend) -> None:
    enqueue_id(backend, "a", dedupe_key="shared")
    claim_one(backend, "a")
    assert enqueue(backend, "b", dedupe_key="shared") is None


def test_distinct_keys_do_not_exclude_each_other(backend: Backend) -> None:
    assert enqueue(backend, dedupe_key="k1") is not None
    assert enqueue(backend, dedupe_key="k2") is not None


def test_refused_enqueue_leaves_the_holder_untouched(backend: Backend) -> None:
    first = enqueue_id(backend, data={"v": 1}, dedupe_key="k", priority=3)
    before = get(backend, first)
    assert enqueue(backend, data={"v": 2}, dedupe_key="k", priority=0) is None
    assert get(backend, first) == before


# -- dedupe scope pending --------------------------------------------------------------------


def test_pending_scope_allows_one_pending_behind_one_active(backend: Backend) -> None:
    active = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    follower = enqueue(backend, dedupe_key="k", dedupe_scope="pending")
    assert follower is not None
    assert get(backend, active).status == "active"
    assert get(backend, follower).status == "pending"


def test_pending_scope_refuses_a_second_pending_job(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert enqueue(backend, dedupe_key="k", dedupe_scope="pending") is None
    assert backend.count_jobs() == 1


def test_pending_scope_refuses_a_second_follower_behind_an_active_run(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert enqueue(backend, dedupe_key="k", dedupe_scope="pending") is None
    assert backend.count_jobs() == 2


def test_pending_scope_follower_is_not_claimed_while_the_key_runs(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert backend.claim("t", limit=5) == []
    assert get(backend, follower).status == "pending"
    assert get(backend, follower).attempts == 0


def test_claim_skips_a_blocked_follower_and_takes_the_next_job(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending", priority=-5)  # first in line
    clock.advance(1)
    other = enqueue_id(backend, priority=5)
    handles = backend.claim("t", limit=3)
    assert [h.id for h in handles] == [other]


def test_pending_scope_follower_becomes_claimable_once_the_run_completes(
    backend: Backend,
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    running = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert backend.claim("t") == []
    assert running.complete() == "completed"
    (handle,) = backend.claim("t")
    assert handle.id == follower
    assert handle.attempts == 1


def test_pending_scope_key_spans_types(backend: Backend) -> None:
    enqueue_id(backend, "a", dedupe_key="k", dedupe_scope="pending")
    assert enqueue(backend, "b", dedupe_key="k", dedupe_scope="pending") is None
    claim_one(backend, "a")
    follower_b = enqueue_id(backend, "b", dedupe_key="k", dedupe_scope="pending")
    assert backend.claim("b") == []  # the key already runs (as type a)
    assert get(backend, follower_b).status == "pending"


def test_pending_scope_key_is_free_after_everything_ends(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert claim_one(backend).complete() == "completed"
    assert enqueue(backend, dedupe_key="k", dedupe_scope="pending") is not None


# -- scope conflicts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("live_scope", "other_scope"),
    [("pending+active", "pending"), ("pending", "pending+active")],
)
@pytest.mark.parametrize("live_status", ["pending", "active"])
def test_enqueue_under_the_other_scope_raises_and_stores_nothing(
    backend: Backend, live_scope: str, other_scope: str, live_status: str
) -> None:
    live = enqueue_id(backend, "a", dedupe_key="k", dedupe_scope=live_scope)
    if live_status == "active":
        claim_one(backend, "a")
    with pytest.raises(DedupeScopeConflictError) as info:
        enqueue(backend, "b", data={"x": 1}, dedupe_key="k", dedupe_scope=other_scope)
    err = info.value
    assert (err.dedupe_key, err.requested_scope, err.live_scope) == ("k", other_scope, live_scope)
    assert live_scope in str(err) and other_scope in str(err)
    assert [j.id for j in backend.list_jobs()] == [live]
    assert get(backend, live).status == live_status
    assert backend.job_types() == ["a"]


@pytest.mark.parametrize(
    ("live_scope", "other_scope"),
    [("pending+active", "pending"), ("pending", "pending+active")],
)
def test_key_is_free_for_the_other_scope_once_its_live_job_ends(
    backend: Backend, live_scope: str, other_scope: str
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope=live_scope)
    with pytest.raises(DedupeScopeConflictError):
        enqueue(backend, dedupe_key="k", dedupe_scope=other_scope)
    assert claim_one(backend).complete() == "completed"
    new = enqueue(backend, dedupe_key="k", dedupe_scope=other_scope)
    assert new is not None
    assert get(backend, new).dedupe_scope == other_scope


def test_scope_conflict_is_raised_even_with_coalesce(backend: Backend) -> None:
    holder = enqueue_id(backend, data={"v": 1}, dedupe_key="k", dedupe_scope="pending")
    with pytest.raises(DedupeScopeConflictError):
        enqueue(
            backend, data={"v": 2}, dedupe_key="k", dedupe_scope="pending+active", coalesce="latest"
        )
    assert get(backend, holder).data == {"v": 1}
    assert backend.count_jobs() == 1


def test_scope_conflict_with_pending_follower_and_active_run(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    with pytest.raises(DedupeScopeConflictError):
        enqueue(backend, dedupe_key="k")
    assert backend.count_jobs() == 2


# -- coalesce latest -------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["pending+active", "pending"])
def test_coalesce_latest_replaces_the_pending_payload(
    backend: Backend, clock: FakeClock, scope: str
) -> None:
    pending = enqueue_id(backend, data={"v": 1}, dedupe_key="k", dedupe_scope=scope)
    clock.advance(2)
    result = backend.enqueue(
        build_new_job(
            "t", {"v": 2}, dedupe_key="k", dedupe_scope=scope, coalesce="latest", priority=9
        )
    )
    assert result.job_id is None
    assert result.coalesced is True
    job = get(backend, pending)
    assert job.data == {"v": 2}
    assert job.priority == 0  # only the payload is replaced
    assert job.updated_at == clock.now()
    assert job.created_at == clock.now() - timedelta(seconds=2)
    assert backend.count_jobs() == 1


def test_without_coalesce_the_pending_follower_keeps_its_first_payload(backend: Backend) -> None:
    pending = enqueue_id(backend, data={"v": 1}, dedupe_key="k")
    result = backend.enqueue(build_new_job("t", {"v": 2}, dedupe_key="k"))
    assert (result.job_id, result.coalesced) == (None, False)
    assert get(backend, pending).data == {"v": 1}


def test_coalesce_never_touches_the_active_payload(backend: Backend) -> None:
    active = enqueue_id(backend, data={"v": 1}, dedupe_key="k")
    claim_one(backend)
    result = backend.enqueue(build_new_job("t", {"v": 2}, dedupe_key="k", coalesce="latest"))
    assert (result.job_id, result.coalesced) == (None, False)
    assert get(backend, active).data == {"v": 1}
    assert backend.count_jobs() == 1


def test_coalesce_replaces_the_follower_not_the_active_run_in_pending_scope(
    backend: Backend,
) -> None:
    active = enqueue_id(backend, data={"v": 1}, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    follower = enqueue_id(backend, data={"v": 2}, dedupe_key="k", dedupe_scope="pending")
    result = backend.enqueue(
        build_new_job("t", {"v": 3}, dedupe_key="k", dedupe_scope="pending", coalesce="latest")
    )
    assert (result.job_id, result.coalesced) == (None, True)
    assert get(backend, active).data == {"v": 1}
    assert get(backend, follower).data == {"v": 3}


def test_coalesce_on_the_first_enqueue_just_creates_the_job(backend: Backend) -> None:
    job_id = enqueue_id(backend, data={"v": 1}, dedupe_key="k", coalesce="latest")
    assert get(backend, job_id).data == {"v": 1}


def test_coalesce_does_not_replace_a_pending_job_of_another_type(backend: Backend) -> None:
    holder = enqueue_id(backend, "a", data={"v": 1}, dedupe_key="k")
    result = backend.enqueue(build_new_job("b", {"v": 2}, dedupe_key="k", coalesce="latest"))
    assert (result.job_id, result.coalesced) == (None, False)
    assert get(backend, holder).data == {"v": 1}


def test_enqueue_of_an_unstorable_payload_raises_type_error_before_writing(
    backend: Backend,
) -> None:
    with pytest.raises(TypeError):
        enqueue(backend, data={"when": object()})
    assert backend.count_jobs() == 0
