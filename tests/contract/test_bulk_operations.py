"""retry_matching, delete_matching, cancel_matching and run_now_matching: every matching job
in one store operation, with the single-job rules (a failed job whose dedupe key is live
stays failed; active jobs are never deleted; a cancelled active job is asked through its
heartbeat; a job already due keeps its place), the same on every store; and run_now."""

from __future__ import annotations

from typing import Any

import pytest

from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue_id, get


def fail_now(backend: Backend, type: str = "t", reason: str = "broken", **options: Any) -> str:
    job_id = enqueue_id(backend, type, priority=-1000, **options)
    handle = claim_one(backend, type)
    assert handle.id == job_id
    assert handle.fail_fatal(reason) == "failed-terminal"
    return job_id


def test_retry_matching_retries_every_failed_job_of_the_filter(
    backend: Backend, clock: FakeClock
) -> None:
    a = [fail_now(backend, "a", data={"n": n}) for n in range(3)]
    b = fail_now(backend, "b")
    pending = enqueue_id(backend, "a", data={"n": 9})
    assert backend.retry_matching(type="a") == 3
    for job_id in a:
        job = get(backend, job_id)
        assert job.status == "pending" and job.attempts == 0 and job.failure_kind is None
    assert get(backend, b).status == "failed"
    assert get(backend, pending).status == "pending"
    assert backend.retry_matching(type="a") == 0
    assert backend.retry_matching() == 1
    assert get(backend, b).status == "pending"


def test_retry_matching_filters_by_kind_and_search(backend: Backend) -> None:
    smtp = fail_now(backend, reason="SMTP 550", data={"n": 1})
    other = fail_now(backend, reason="timeout", data={"n": 2})
    assert backend.retry_matching(search="SMTP") == 1
    assert get(backend, smtp).status == "pending"
    assert get(backend, other).status == "failed"
    assert backend.retry_matching(failure_kind="stalled") == 0
    assert backend.retry_matching(failure_kind="fatal") == 1


def test_retry_matching_keeps_a_job_whose_key_is_live_failed(backend: Backend) -> None:
    blocked = fail_now(backend, dedupe_key="k")
    free = fail_now(backend, dedupe_key="other")
    live = enqueue_id(backend, dedupe_key="k")
    assert backend.retry_matching() == 1
    assert get(backend, blocked).status == "failed"
    assert get(backend, free).status == "pending"
    assert get(backend, live).status == "pending"


def test_retry_matching_gives_a_shared_key_to_one_job_only(backend: Backend) -> None:
    first = fail_now(backend, dedupe_key="k", data={"n": 1})
    second = fail_now(backend, dedupe_key="k", data={"n": 2})
    assert backend.retry_matching() == 1
    statuses = {get(backend, first).status, get(backend, second).status}
    assert statuses == {"pending", "failed"}
    assert get(backend, first).status == "pending"  # oldest first


@pytest.mark.parametrize("status", ["pending", "active", "completed"])
def test_retry_matching_refuses_another_status(backend: Backend, status: str) -> None:
    with pytest.raises(ValueError, match="failed"):
        backend.retry_matching(status=status)


def test_retry_matching_checks_its_filters_like_list_jobs(backend: Backend) -> None:
    with pytest.raises(TypeError, match="unknown job filters"):
        backend.retry_matching(kind="fatal")
    with pytest.raises(ValueError):
        backend.retry_matching(failure_kind="bogus")  # type: ignore[arg-type]


def test_delete_matching_deletes_every_match_but_never_an_active_job(
    backend: Backend,
) -> None:
    failed = fail_now(backend, "a")
    pending = enqueue_id(backend, "a", data={"n": 1}, priority=5)
    active = enqueue_id(backend, "a", data={"n": 2}, priority=-5)
    assert claim_one(backend, "a").id == active
    other = enqueue_id(backend, "b")
    assert backend.delete_matching(type="a") == 2
    assert backend.get_job(failed) is None and backend.get_job(pending) is None
    assert get(backend, active).status == "active"
    assert get(backend, other).status == "pending"
    assert backend.count_jobs(type="a") == 1


def test_delete_matching_by_status_and_search_frees_the_dedupe_slot(backend: Backend) -> None:
    keyed = enqueue_id(backend, dedupe_key="user:1")
    enqueue_id(backend, dedupe_key="org:1")
    assert backend.delete_matching(status="pending", search="user:") == 1
    assert backend.get_job(keyed) is None
    assert enqueue_id(backend, dedupe_key="user:1") != keyed  # the slot is free again
    assert backend.count_jobs() == 2


def test_delete_matching_refuses_active(backend: Backend) -> None:
    with pytest.raises(ValueError, match="active"):
        backend.delete_matching(status="active")


def test_cancel_matching_cancels_pending_asks_active_and_leaves_terminal_jobs(
    backend: Backend,
) -> None:
    failed = fail_now(backend, "a")
    keyed = enqueue_id(backend, "a", dedupe_key="k", priority=5)
    plain = enqueue_id(backend, "a", data={"n": 1}, priority=5)
    active = enqueue_id(backend, "a", data={"n": 2}, priority=-5)
    handle = claim_one(backend, "a")
    assert handle.id == active
    other = enqueue_id(backend, "b")
    assert backend.cancel_matching(type="a", reason="bulk stop") == 3
    for job_id in (keyed, plain):
        job = get(backend, job_id)
        assert (job.status, job.fail_reason, job.failure_kind) == ("cancelled", "bulk stop", None)
    assert enqueue_id(backend, "a", dedupe_key="k") != keyed  # the slot is free again
    assert get(backend, failed).status == "failed"
    assert get(backend, other).status == "pending"
    assert get(backend, active).status == "active"
    assert handle.heartbeat() == "cancel-requested"
    assert backend.cancel(active) == "not-cancellable"  # already requested
    assert backend.cancel_run(active, handle.claim_token) == "cancelled"
    assert get(backend, active).fail_reason == "bulk stop"


def test_cancel_matching_by_status_and_search_with_the_default_reason(backend: Backend) -> None:
    user = enqueue_id(backend, dedupe_key="user:1")
    org = enqueue_id(backend, dedupe_key="org:1")
    assert backend.cancel_matching(status="active") == 0
    assert backend.cancel_matching(status="pending", search="user:") == 1
    assert (get(backend, user).status, get(backend, user).fail_reason) == ("cancelled", "cancelled")
    assert get(backend, org).status == "pending"
    assert backend.cancel_matching(search="user:") == 0  # a cancelled job stays as it is
    assert backend.cancel_matching() == 1
    assert backend.count_jobs(status="cancelled") == 2


@pytest.mark.parametrize("status", ["failed", "completed", "cancelled"])
def test_cancel_matching_refuses_a_terminal_status(backend: Backend, status: str) -> None:
    with pytest.raises(ValueError, match="pending or active"):
        backend.cancel_matching(status=status)


def test_cancel_matching_checks_its_filters_and_reason(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    with pytest.raises(TypeError, match="unknown job filters"):
        backend.cancel_matching(kind="fatal")
    with pytest.raises(TypeError):
        backend.cancel_matching(reason=42)  # type: ignore[arg-type]
    assert get(backend, job_id).status == "pending"


def test_run_now_makes_a_delayed_job_due_and_keeps_a_due_one_in_place(
    backend: Backend, clock: FakeClock
) -> None:
    delayed = enqueue_id(backend, data={"n": 1}, delay=3600)
    assert backend.claim("t") == []
    clock.advance(5)
    assert backend.run_now(delayed) is True
    job = get(backend, delayed)
    assert (job.status, job.run_at, job.updated_at) == ("pending", backend.now(), backend.now())
    assert claim_one(backend).id == delayed
    first = enqueue_id(backend, data={"n": 2})
    clock.advance(5)
    second = enqueue_id(backend, data={"n": 3})
    first_at = get(backend, first).run_at
    assert backend.run_now(first) is True  # already due: it keeps its place in line
    assert get(backend, first).run_at == first_at
    assert [h.id for h in backend.claim("t", limit=2)] == [first, second]


def test_run_now_is_false_unless_the_job_is_pending(backend: Backend) -> None:
    failed = fail_now(backend)
    assert backend.run_now(failed) is False
    assert get(backend, failed).status == "failed"
    active = enqueue_id(backend, data={"n": 1})
    claim_one(backend)
    assert backend.run_now(active) is False
    assert backend.run_now("0123456789abcdef01234567") is False
    assert backend.run_now("no such id") is False


def test_run_now_matching_moves_every_delayed_pending_job_of_the_filter(
    backend: Backend, clock: FakeClock
) -> None:
    late = [enqueue_id(backend, "a", data={"n": n}, delay=600) for n in range(3)]
    due = enqueue_id(backend, "a", data={"n": 9})
    other = enqueue_id(backend, "b", delay=600)
    clock.advance(1)
    due_at = get(backend, due).run_at
    assert backend.run_now_matching(type="a") == 3  # the due one is not counted
    for job_id in late:
        assert get(backend, job_id).run_at == backend.now()
    assert get(backend, due).run_at == due_at
    assert get(backend, other).run_at > backend.now()
    assert backend.run_now_matching(type="a") == 0
    assert {h.id for h in backend.claim("a", limit=10)} == {*late, due}
    assert backend.run_now_matching(search=other[:8]) == 1
    assert claim_one(backend, "b").id == other


@pytest.mark.parametrize("status", ["active", "failed", "completed"])
def test_run_now_matching_refuses_another_status(backend: Backend, status: str) -> None:
    with pytest.raises(ValueError, match="pending"):
        backend.run_now_matching(status=status)
    with pytest.raises(TypeError, match="unknown job filters"):
        backend.run_now_matching(kind="fatal")
