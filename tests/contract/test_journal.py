"""The orchestration journal: fenced, ordered, idempotent appends on the job, read back by
claim and get_job; and release(run_at=...) for durable sleep."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from durabl.model.job import JobResult
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, claim_one, enqueue_id, expire_leases, get, second_view


def entry(n: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "step", "seq": n, "name": f"s{n}", "result": n, **extra}


def test_every_store_supports_the_journal(backend: Backend) -> None:
    assert backend.supports_journal is True


def test_a_new_job_has_an_empty_journal(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    assert get(backend, job_id).journal == ()
    assert claim_one(backend).journal == ()


def test_appends_are_kept_in_order_and_read_back_by_get_job_and_claim(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=5)
    handle = claim_one(backend)
    assert backend.append_journal(job_id, handle.claim_token, [entry(0)], position=0) == "applied"
    assert handle.append_journal([entry(1), entry(2)], position=1) == "applied"
    expected = (entry(0), entry(1), entry(2))
    assert get(backend, job_id).journal == expected
    assert handle.release() == "released"
    again = claim_one(backend)
    assert again.journal == expected
    assert again.as_job().journal == expected


def test_journal_values_come_back_as_every_store_returns_them(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    value = {"t": (1, "a"), "at": at, "b": b"\x00\xff", "n": None, "d": {"f": 1.5}}
    assert handle.append_journal([entry(0, result=value)], position=0) == "applied"
    (stored,) = get(backend, job_id).journal
    assert stored["result"] == {
        "t": [1, "a"],
        "at": at.replace(microsecond=678000),
        "b": b"\x00\xff",
        "n": None,
        "d": {"f": 1.5},
    }


def test_an_append_with_a_stale_token_is_lease_lost_and_changes_nothing(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=5)
    stale = claim_one(backend)
    assert stale.append_journal([entry(0)], position=0) == "applied"
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1
    current = claim_one(backend)
    before = get(backend, job_id)
    assert stale.append_journal([entry(1)], position=1) == "lease-lost"
    assert get(backend, job_id) == before
    assert current.append_journal([entry(1)], position=1) == "applied"
    assert [e["seq"] for e in get(backend, job_id).journal] == [0, 1]


def test_an_append_with_a_made_up_token_or_unknown_id_is_lease_lost(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    assert backend.append_journal(job_id, "not-the-token", [entry(0)], position=0) == "lease-lost"
    for unknown in ("nope", "", "0" * 24, "f" * 32):
        assert backend.append_journal(unknown, handle.claim_token, [entry(0)], position=0) == (
            "lease-lost"
        )
    assert get(backend, job_id).journal == ()


def test_an_append_to_a_pending_or_finished_job_is_lease_lost(backend: Backend) -> None:
    job_id = enqueue_id(backend, max_attempts=5)
    handle = claim_one(backend)
    handle.release()
    assert handle.append_journal([entry(0)], position=0) == "lease-lost"
    done = claim_one(backend)
    assert done.complete() == "completed"
    assert done.append_journal([entry(0)], position=0) == "lease-lost"
    assert get(backend, job_id).journal == ()


def test_a_repeated_append_is_applied_once(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.append_journal([entry(0), entry(1)], position=0) == "applied"
    assert handle.append_journal([entry(0), entry(1)], position=0) == "applied"
    assert handle.append_journal([entry(2)], position=2) == "applied"
    assert [e["seq"] for e in get(backend, job_id).journal] == [0, 1, 2]


def test_an_append_at_the_wrong_position_is_refused(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.append_journal([entry(0)], position=0) == "applied"
    assert handle.append_journal([entry(5)], position=3) == "lease-lost"
    assert [e["seq"] for e in get(backend, job_id).journal] == [0]


def test_the_journal_survives_fail_reap_and_retry(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=2)
    handle = claim_one(backend)
    handle.append_journal([entry(0)], position=0)
    assert handle.fail("boom", retry_at=clock.now()) == "retry-scheduled"
    again = claim_one(backend)
    assert again.journal == (entry(0),)
    again.append_journal([entry(1)], position=1)
    expire_leases(clock, backend)
    assert backend.reap(VT).stalled == 1
    assert backend.retry(job_id)
    assert claim_one(backend).journal == (entry(0), entry(1))


def test_another_view_of_the_store_reads_the_journal(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    handle.append_journal([entry(0)], position=0)
    other = second_view(backend, clock)
    job = other.get_job(job_id)
    assert job is not None and job.journal == (entry(0),)
    if other is not backend:
        other.close()


def test_the_journal_is_not_in_the_job_repr(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    handle.append_journal([entry(0, result="secret-ish")], position=0)
    assert "secret-ish" not in repr(get(backend, handle.id))


# -- release(run_at=...) ------------------------------------------------------------------------


def test_release_at_a_wake_time_refunds_the_attempt_and_waits(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=1)
    handle = claim_one(backend)
    wake = clock.now() + timedelta(hours=1)
    assert backend.release(job_id, handle.claim_token, run_at=wake) == JobResult("released")
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.run_at) == ("pending", 0, wake)
    assert backend.claim("t") == []
    clock.advance(3600)
    assert claim_one(backend).attempts == 1


def test_release_at_a_wake_time_with_a_stale_token_is_lease_lost(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    before = get(backend, job_id)
    later = clock.now() + timedelta(hours=1)
    assert backend.release(job_id, "stale", run_at=later) == JobResult("lease-lost")
    assert get(backend, job_id) == before
    assert handle.release(run_at=later) == "released"
    assert handle.release(run_at=later) == "released"  # the receipt answers a repeat
