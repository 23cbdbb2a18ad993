"""retry_matching and delete_matching: every matching job in one store operation, with the
single-job rules (a failed job whose dedupe key is live stays failed; active jobs are
never deleted), the same on every store."""

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
