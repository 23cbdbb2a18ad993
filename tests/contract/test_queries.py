"""Operations and queries: get_job, list_jobs, count_jobs (filters, search, paging),
get_stats, retry, delete, has_outstanding, job_types."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durabl import DedupeScopeConflictError
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import (
    VT,
    claim_one,
    enqueue,
    enqueue_id,
    expire_leases,
    get,
)


def fail_terminal(backend: Backend, type: str = "t", **options: Any) -> str:
    """A job of ``type`` that failed ``fatal``; returns its id. Its priority puts it ahead
    of anything else waiting, so the claim takes it."""
    job_id = enqueue_id(backend, type, priority=-1000, **options)
    handle = claim_one(backend, type)
    assert handle.id == job_id
    assert handle.fail_fatal("broken") == "failed-terminal"
    return job_id


# -- list_jobs and count_jobs ----------------------------------------------------------------


def test_list_jobs_is_newest_first(backend: Backend, clock: FakeClock) -> None:
    ids = []
    for n in range(4):
        ids.append(enqueue_id(backend, data={"n": n}))
        clock.advance(1)
    assert [j.id for j in backend.list_jobs()] == ids[::-1]


def test_list_jobs_is_newest_first_even_within_one_instant(backend: Backend) -> None:
    ids = [enqueue_id(backend, data={"n": n}) for n in range(4)]
    assert [j.id for j in backend.list_jobs()] == ids[::-1]


def test_list_failed_is_newest_failure_first(backend: Backend, clock: FakeClock) -> None:
    first, second, third = (enqueue_id(backend, data={"n": n}, max_attempts=1) for n in range(3))
    handles = {h.id: h for h in backend.claim("t", limit=3)}
    for job_id in (second, third, first):  # fail in an order unlike creation order
        clock.advance(1)
        assert handles[job_id].fail_fatal("x") == "failed-terminal"
    assert [j.id for j in backend.list_jobs(status="failed")] == [first, third, second]


def test_list_failed_orders_a_retried_and_failed_again_job_by_its_last_failure(
    backend: Backend, clock: FakeClock
) -> None:
    early = fail_terminal(backend, data={"n": 1})
    clock.advance(1)
    late = fail_terminal(backend, data={"n": 2})
    clock.advance(1)
    assert backend.retry(early)
    assert claim_one(backend).fail_fatal("again") == "failed-terminal"
    assert [j.id for j in backend.list_jobs(status="failed")] == [early, late]


def test_list_jobs_filters_by_status_type_and_failure_kind(
    backend: Backend, clock: FakeClock
) -> None:
    pending_a = enqueue_id(backend, "a", data={"n": 1}, priority=5)
    active_a = enqueue_id(backend, "a", data={"n": 2})
    assert claim_one(backend, "a").id == active_a
    fatal_b = fail_terminal(backend, "b", data={"n": 3})
    exhausted_b = enqueue_id(backend, "b", data={"n": 4}, max_attempts=1)
    claim_one(backend, "b").fail("x", retry_at=clock.now())
    completed_a = enqueue_id(backend, "a", data={"n": 5}, priority=-1)
    claim_one(backend, "a").complete()

    def ids(**filters: str) -> set[str]:
        return {j.id for j in backend.list_jobs(**filters)}  # type: ignore[arg-type]

    assert ids(status="pending") == {pending_a}
    assert ids(status="active") == {active_a}
    assert ids(status="completed") == {completed_a}
    assert ids(status="failed") == {fatal_b, exhausted_b}
    assert ids(type="a") == {pending_a, active_a, completed_a}
    assert ids(type="b", status="failed", failure_kind="fatal") == {fatal_b}
    assert ids(failure_kind="retries-exhausted") == {exhausted_b}
    assert ids(type="c") == set()
    assert backend.count_jobs() == 5
    assert backend.count_jobs(type="a") == 3
    assert backend.count_jobs(status="failed", type="b") == 2
    assert backend.count_jobs(failure_kind="fatal") == 1


def test_list_jobs_searches_by_exact_id(backend: Backend) -> None:
    target = enqueue_id(backend, data={"n": 1})
    enqueue_id(backend, data={"n": 2})
    assert [j.id for j in backend.list_jobs(search=target)] == [target]
    assert backend.count_jobs(search=target) == 1
    assert target in {j.id for j in backend.list_jobs(search=target[:-2])}  # a prefix


def test_list_jobs_searches_by_dedupe_key_prefix(backend: Backend) -> None:
    u1 = enqueue_id(backend, dedupe_key="user:1")
    u12 = enqueue_id(backend, dedupe_key="user:12")
    enqueue_id(backend, dedupe_key="org:1")
    enqueue_id(backend)
    assert {j.id for j in backend.list_jobs(search="user:1")} == {u1, u12}
    assert {j.id for j in backend.list_jobs(search="user:12")} == {u12}
    assert backend.count_jobs(search="user:") == 2
    assert backend.list_jobs(search="ser:1") == []  # a prefix, not a substring


def test_search_treats_regex_characters_literally(backend: Backend) -> None:
    dotted = enqueue_id(backend, dedupe_key="a.b(1)")
    enqueue_id(backend, dedupe_key="axb(1)")
    assert [j.id for j in backend.list_jobs(search="a.b(")] == [dotted]
    assert backend.count_jobs(search=".*") == 0


def test_search_combines_with_other_filters(backend: Backend) -> None:
    enqueue_id(backend, "a", dedupe_key="k:1")
    b = fail_terminal(backend, "b", dedupe_key="k:2")
    assert [j.id for j in backend.list_jobs(search="k:", status="failed")] == [b]
    assert backend.count_jobs(search="k:", type="a") == 1


def test_list_jobs_pages_with_limit_and_offset(backend: Backend) -> None:
    ids = [enqueue_id(backend, data={"n": n}) for n in range(5)][::-1]
    assert [j.id for j in backend.list_jobs(limit=2)] == ids[:2]
    assert [j.id for j in backend.list_jobs(limit=2, offset=2)] == ids[2:4]
    assert [j.id for j in backend.list_jobs(limit=2, offset=4)] == ids[4:]
    assert backend.list_jobs(limit=2, offset=5) == []
    assert [j.id for j in backend.list_jobs(offset=1)] == ids[1:]


def test_list_failed_pages_in_failure_order(backend: Backend, clock: FakeClock) -> None:
    ids = []
    for n in range(3):
        clock.advance(1)
        ids.append(fail_terminal(backend, data={"n": n}))
    newest_first = ids[::-1]
    assert [j.id for j in backend.list_jobs(status="failed", limit=2)] == newest_first[:2]
    assert [j.id for j in backend.list_jobs(status="failed", limit=2, offset=2)] == newest_first[2:]


def test_list_jobs_limit_zero_means_no_limit(backend: Backend) -> None:
    ids = [enqueue_id(backend, data={"n": n}) for n in range(3)]
    assert [j.id for j in backend.list_jobs(limit=0)] == ids[::-1]
    assert [j.id for j in backend.list_jobs(limit=0, offset=1)] == ids[::-1][1:]


def test_a_negative_offset_is_a_value_error(backend: Backend) -> None:
    for n in range(3):
        enqueue_id(backend, data={"n": n})
    with pytest.raises(ValueError):
        backend.list_jobs(offset=-1)


def test_an_unknown_filter_is_a_type_error_naming_the_filters(backend: Backend) -> None:
    enqueue_id(backend)
    with pytest.raises(TypeError, match="unknown job filters \\['state'\\]"):
        backend.list_jobs(state="failed")
    with pytest.raises(TypeError, match="status, type, failure_kind, search"):
        backend.count_jobs(kind="fatal")


@pytest.mark.parametrize("page", [{"limit": -1}, {"limit": 2.5}, {"limit": True}, {"offset": "1"}])
def test_every_store_refuses_the_same_bad_pages(backend: Backend, page: dict[str, Any]) -> None:
    enqueue_id(backend)
    with pytest.raises(ValueError, match="must be a whole number >= 0"):
        backend.list_jobs(**page)
    assert backend.count_jobs() == 1


def test_failures_at_the_same_instant_list_the_newest_job_first(backend: Backend) -> None:
    older, newer = (enqueue_id(backend, data={"n": n}) for n in range(2))
    for handle in backend.claim("t", limit=2)[::-1]:
        handle.fail_fatal("x")
    assert [j.id for j in backend.list_jobs(status="failed")] == [newer, older]


@pytest.mark.parametrize("method", ["list_jobs", "count_jobs"])
def test_an_invalid_status_is_a_value_error(backend: Backend, method: str) -> None:
    with pytest.raises(ValueError):
        getattr(backend, method)(status="running")


@pytest.mark.parametrize("method", ["list_jobs", "count_jobs"])
def test_an_invalid_failure_kind_is_a_value_error(backend: Backend, method: str) -> None:
    with pytest.raises(ValueError):
        getattr(backend, method)(failure_kind="crashed")


def test_list_jobs_returns_full_snapshots(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, data={"n": 1}, dedupe_key="k", priority=2)
    (listed,) = backend.list_jobs()
    assert listed == get(backend, job_id)


# -- get_stats -------------------------------------------------------------------------------


def test_stats_of_an_empty_store_are_zero(backend: Backend) -> None:
    stats = backend.get_stats()
    assert (stats.pending, stats.active, stats.completed, stats.failed, stats.superseded) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert stats.oldest_pending_run_at is None
    assert stats.oldest_pending_lag == 0.0
    assert dict(stats.failed_by_kind) == {}


def build_mixed_store(backend: Backend, clock: FakeClock) -> None:
    """Type a: 2 pending (one future), 1 active, 1 completed, failed fatal + stalled,
    1 superseded. Type b: 1 pending, 1 failed retries-exhausted."""
    enqueue_id(backend, "a", data={"n": 1}, priority=-9)
    clock.advance(1)
    claim_one(backend, "a").complete()
    enqueue_id(backend, "a", data={"n": 2}, priority=-9)
    claim_one(backend, "a").fail_fatal("poison")
    enqueue_id(backend, "a", data={"n": 3}, priority=-9, max_attempts=1)
    claim_one(backend, "a")
    expire_leases(clock, backend)
    assert backend.reap(VT).stalled == 1
    enqueue_id(backend, "a", dedupe_key="k", dedupe_scope="pending", priority=-9)
    superseded = claim_one(backend, "a")
    enqueue_id(backend, "a", dedupe_key="k", dedupe_scope="pending")  # pending, due
    assert superseded.release() == "superseded"
    enqueue_id(backend, "a", data={"n": 4}, priority=-9)
    claim_one(backend, "a")  # active
    enqueue_id(backend, "a", data={"n": 5}, run_at=clock.now() + timedelta(hours=1))
    enqueue_id(backend, "b", data={"n": 6}, max_attempts=1)
    claim_one(backend, "b").fail("flaky", retry_at=clock.now())
    enqueue_id(backend, "b", data={"n": 7})


def test_stats_count_every_status_and_failure_kind_per_type(
    backend: Backend, clock: FakeClock
) -> None:
    build_mixed_store(backend, clock)
    a = backend.get_stats("a")
    assert (a.pending, a.active, a.completed, a.failed, a.superseded) == (2, 1, 1, 2, 1)
    assert dict(a.failed_by_kind) == {"fatal": 1, "stalled": 1}
    b = backend.get_stats("b")
    assert (b.pending, b.active, b.completed, b.failed, b.superseded) == (1, 0, 0, 1, 0)
    assert dict(b.failed_by_kind) == {"retries-exhausted": 1}
    total = backend.get_stats()
    assert (total.pending, total.active, total.completed, total.failed, total.superseded) == (
        3,
        1,
        1,
        3,
        1,
    )
    assert dict(total.failed_by_kind) == {"fatal": 1, "stalled": 1, "retries-exhausted": 1}
    assert backend.get_stats("nothing").pending == 0


def test_oldest_pending_lag_is_the_age_of_the_oldest_due_job(
    backend: Backend, clock: FakeClock
) -> None:
    oldest_at = clock.now()
    enqueue_id(backend, "a", data={"n": 1})
    clock.advance(30)
    enqueue_id(backend, "a", data={"n": 2})
    enqueue_id(backend, "b", data={"n": 3})
    clock.advance(12.5)
    stats = backend.get_stats("a")
    assert stats.oldest_pending_run_at == oldest_at
    assert stats.oldest_pending_lag == pytest.approx(42.5)
    b = backend.get_stats("b")
    assert b.oldest_pending_lag == pytest.approx(12.5)
    assert backend.get_stats().oldest_pending_lag == pytest.approx(42.5)


def test_oldest_pending_lag_excludes_future_jobs(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend, data={"n": 1}, run_at=clock.now() - timedelta(seconds=1))
    claim_one(backend)  # no longer pending
    enqueue_id(backend, data={"n": 2}, run_at=clock.now() + timedelta(days=7))
    stats = backend.get_stats()
    assert stats.pending == 1
    assert stats.oldest_pending_run_at is None
    assert stats.oldest_pending_lag == 0.0
    clock.advance(5)
    due = enqueue_id(backend, data={"n": 3})
    clock.advance(3)
    stats = backend.get_stats()
    assert stats.pending == 2
    assert stats.oldest_pending_run_at == get(backend, due).run_at
    assert stats.oldest_pending_lag == pytest.approx(3.0)


def test_oldest_pending_lag_counts_from_run_at_not_enqueue(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, run_at=clock.now() + timedelta(seconds=10))
    clock.advance(25)
    assert backend.get_stats().oldest_pending_lag == pytest.approx(15.0)


def test_a_job_due_exactly_now_counts_with_zero_lag(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend)
    stats = backend.get_stats()
    assert stats.oldest_pending_run_at == clock.now()
    assert stats.oldest_pending_lag == 0.0


def test_active_jobs_do_not_count_as_lag(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend)
    claim_one(backend)
    clock.advance(100)
    assert backend.get_stats().oldest_pending_lag == 0.0


# -- retry -----------------------------------------------------------------------------------


def test_retry_puts_a_failed_job_back_to_pending_with_attempts_zero(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=2)
    claim_one(backend).fail("one", retry_at=clock.now())
    claim_one(backend).fail("two", retry_at=clock.now())
    clock.advance(60)
    assert backend.retry(job_id) is True
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.failure_kind) == ("pending", 0, None)
    assert job.run_at == clock.now()
    handle = claim_one(backend)
    assert (handle.id, handle.attempts) == (job_id, 1)


@pytest.mark.parametrize("kind", ["fatal", "stalled", "retries-exhausted"])
def test_retry_works_for_every_failure_kind(backend: Backend, clock: FakeClock, kind: str) -> None:
    job_id = enqueue_id(backend, max_attempts=1)
    handle = claim_one(backend)
    if kind == "fatal":
        handle.fail_fatal("x")
    elif kind == "retries-exhausted":
        handle.fail("x", retry_at=clock.now())
    else:
        expire_leases(clock, backend)
        backend.reap(VT)
    assert get(backend, job_id).failure_kind == kind
    assert backend.retry(job_id) is True
    assert backend.count_jobs(status="failed") == 0


def test_retry_of_a_job_that_is_not_failed_is_false(backend: Backend) -> None:
    pending = enqueue_id(backend, data={"n": 1}, priority=1)
    active = enqueue_id(backend, data={"n": 2})
    claim_one(backend)
    completed = enqueue_id(backend, data={"n": 3}, priority=-1)
    claim_one(backend).complete()
    for job_id, status in ((pending, "pending"), (active, "active"), (completed, "completed")):
        assert backend.retry(job_id) is False
        assert get(backend, job_id).status == status


def test_retry_of_a_superseded_job_is_false(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    handle = claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    handle.release()
    assert backend.retry(handle.id) is False


def test_retry_of_an_unknown_job_is_false(backend: Backend) -> None:
    gone = fail_terminal(backend)
    assert backend.delete(gone)
    for job_id in ("nope", "", "0" * 24, "f" * 32, gone):
        assert backend.retry(job_id) is False


def test_retry_twice_is_false_the_second_time(backend: Backend) -> None:
    job_id = fail_terminal(backend)
    assert backend.retry(job_id) is True
    assert backend.retry(job_id) is False
    assert backend.count_jobs() == 1


@pytest.mark.parametrize(
    ("scope", "live"),
    [("pending+active", "pending"), ("pending+active", "active"), ("pending", "pending")],
)
def test_retry_is_false_while_the_key_is_live_again(
    backend: Backend, scope: str, live: str
) -> None:
    failed = fail_terminal(backend, dedupe_key="k", dedupe_scope=scope)
    other = enqueue_id(backend, dedupe_key="k", dedupe_scope=scope)
    if live == "active":
        claim_one(backend)
    assert backend.retry(failed) is False
    assert get(backend, failed).status == "failed"
    assert get(backend, other).status == live


def test_retry_is_false_while_a_pending_scope_key_has_run_and_follower(backend: Backend) -> None:
    failed = fail_terminal(backend, dedupe_key="k", dedupe_scope="pending")
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert backend.retry(failed) is False
    assert get(backend, failed).status == "failed"


@pytest.mark.parametrize(
    ("failed_scope", "live_scope"), [("pending+active", "pending"), ("pending", "pending+active")]
)
@pytest.mark.parametrize("live", ["pending", "active"])
def test_retry_is_false_while_the_key_is_live_under_the_other_scope(
    backend: Backend, failed_scope: str, live_scope: str, live: str
) -> None:
    failed = fail_terminal(backend, dedupe_key="k", dedupe_scope=failed_scope)
    other = enqueue_id(backend, dedupe_key="k", dedupe_scope=live_scope)
    if live == "active":
        claim_one(backend)
    assert backend.retry(failed) is False
    assert get(backend, failed).status == "failed"
    assert get(backend, other).status == live


def test_retried_job_takes_its_key_back(backend: Backend) -> None:
    failed = fail_terminal(backend, dedupe_key="k")
    assert backend.retry(failed) is True
    assert enqueue(backend, dedupe_key="k") is None
    with pytest.raises(DedupeScopeConflictError):
        enqueue(backend, dedupe_key="k", dedupe_scope="pending")


def test_retry_is_true_once_the_key_is_free_again(backend: Backend) -> None:
    failed = fail_terminal(backend, dedupe_key="k")
    enqueue_id(backend, dedupe_key="k")
    claim_one(backend).complete()
    assert backend.retry(failed) is True


def test_retry_of_a_pending_scope_job_behind_an_active_run_becomes_its_follower(
    backend: Backend,
) -> None:
    """The pending slot is free, so the retried job takes it, as an enqueue would: it is
    the key's follower and waits for the active run to end."""
    failed = fail_terminal(backend, dedupe_key="k", dedupe_scope="pending")
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    running = claim_one(backend)
    assert backend.retry(failed) is True
    assert enqueue(backend, dedupe_key="k", dedupe_scope="pending") is None
    assert backend.claim("t") == []
    assert running.complete() == "completed"
    assert claim_one(backend).id == failed


# -- delete ----------------------------------------------------------------------------------


def test_delete_removes_pending_and_terminal_jobs(backend: Backend) -> None:
    pending = enqueue_id(backend, data={"n": 1}, priority=1)
    done = enqueue_id(backend, data={"n": 2})
    claim_one(backend).complete()
    failed = fail_terminal(backend, data={"n": 3})
    for job_id in (pending, done, failed):
        assert backend.delete(job_id) is True
        assert backend.get_job(job_id) is None
    assert backend.count_jobs() == 0


def test_delete_refuses_an_active_job(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    assert backend.delete(job_id) is False
    assert get(backend, job_id).status == "active"
    assert handle.complete() == "completed"


def test_delete_of_an_unknown_job_is_false(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    assert backend.delete(job_id) is True
    for unknown in (job_id, "nope", "", "0" * 24, "f" * 32):
        assert backend.delete(unknown) is False


@pytest.mark.parametrize("scope", ["pending+active", "pending"])
def test_deleting_a_pending_job_frees_its_key(backend: Backend, scope: str) -> None:
    job_id = enqueue_id(backend, dedupe_key="k", dedupe_scope=scope)
    assert backend.delete(job_id)
    assert backend.has_outstanding("t", "k") is False
    assert enqueue(backend, dedupe_key="k", dedupe_scope=scope) is not None


def test_deleting_a_pending_follower_leaves_the_active_run_holding_the_key(
    backend: Backend,
) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    running = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert backend.delete(follower)
    assert backend.has_outstanding("t", "k") is True
    assert backend.claim("t") == []
    new_follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert backend.claim("t") == []
    assert running.complete() == "completed"
    assert claim_one(backend).id == new_follower


# -- has_outstanding and job_types -----------------------------------------------------------


@pytest.mark.parametrize("scope", ["pending+active", "pending"])
def test_has_outstanding_while_pending_or_active_only(backend: Backend, scope: str) -> None:
    assert backend.has_outstanding("t", "k") is False
    enqueue_id(backend, dedupe_key="k", dedupe_scope=scope)
    assert backend.has_outstanding("t", "k") is True
    handle = claim_one(backend)
    assert backend.has_outstanding("t", "k") is True
    handle.complete()
    assert backend.has_outstanding("t", "k") is False


def test_has_outstanding_is_per_type_and_key(backend: Backend) -> None:
    enqueue_id(backend, "a", dedupe_key="k")
    assert backend.has_outstanding("a", "k") is True
    assert backend.has_outstanding("b", "k") is False
    assert backend.has_outstanding("a", "k2") is False
    assert backend.has_outstanding("a", "") is False


def test_has_outstanding_sees_a_follower_behind_an_active_run(backend: Backend) -> None:
    enqueue_id(backend, "a", dedupe_key="k", dedupe_scope="pending")
    claim_one(backend, "a")
    enqueue_id(backend, "b", dedupe_key="k", dedupe_scope="pending")
    assert backend.has_outstanding("a", "k") is True
    assert backend.has_outstanding("b", "k") is True


def test_has_outstanding_is_false_after_failure(backend: Backend) -> None:
    fail_terminal(backend, dedupe_key="k")
    assert backend.has_outstanding("t", "k") is False


def test_job_types_lists_every_stored_type_sorted(backend: Backend) -> None:
    assert backend.job_types() == []
    enqueue_id(backend, "zeta")
    enqueue_id(backend, "alpha")
    enqueue_id(backend, "alpha")
    fail_terminal(backend, "mid")
    assert backend.job_types() == ["alpha", "mid", "zeta"]


def test_job_types_forgets_a_type_whose_jobs_are_deleted(backend: Backend) -> None:
    job_id = enqueue_id(backend, "gone")
    enqueue_id(backend, "kept")
    backend.delete(job_id)
    assert backend.job_types() == ["kept"]
