"""Claiming: order (priority, then run_at, then insertion), due jobs only, one type, limit,
fresh tokens and attempt counting; claim_next_by_key."""

from __future__ import annotations

from datetime import timedelta

from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue_id, get


def claimed_ids(backend: Backend, type: str = "t", limit: int = 100) -> list[str]:
    return [h.id for h in backend.claim(type, limit=limit)]


def test_claim_on_an_empty_store_returns_nothing(backend: Backend) -> None:
    assert backend.claim("t") == []
    assert backend.claim("t", limit=10) == []


def test_claim_takes_lower_priority_first(backend: Backend) -> None:
    low = enqueue_id(backend, priority=10)
    high = enqueue_id(backend, priority=-3)
    mid = enqueue_id(backend, priority=0)
    assert [claim_one(backend).id for _ in range(3)] == [high, mid, low]


def test_claim_breaks_priority_ties_by_oldest_run_at(backend: Backend, clock: FakeClock) -> None:
    now = clock.now()
    later = enqueue_id(backend, run_at=now - timedelta(seconds=10))
    earlier = enqueue_id(backend, run_at=now - timedelta(seconds=20))
    latest = enqueue_id(backend, run_at=now - timedelta(seconds=5))
    assert [claim_one(backend).id for _ in range(3)] == [earlier, later, latest]


def test_claim_breaks_run_at_ties_by_insertion_order(backend: Backend, clock: FakeClock) -> None:
    run_at = clock.now()
    ids = [enqueue_id(backend, data={"n": n}, run_at=run_at) for n in range(5)]
    assert [claim_one(backend).id for _ in range(5)] == ids


def test_priority_wins_over_run_at(backend: Backend, clock: FakeClock) -> None:
    old_but_low = enqueue_id(backend, priority=1, run_at=clock.now() - timedelta(hours=1))
    new_but_high = enqueue_id(backend, priority=0)
    assert claimed_ids(backend) == [new_but_high, old_but_low]


def test_claim_with_limit_returns_jobs_in_claim_order(backend: Backend, clock: FakeClock) -> None:
    c = enqueue_id(backend, priority=2)
    a = enqueue_id(backend, priority=0, run_at=clock.now() - timedelta(seconds=1))
    b = enqueue_id(backend, priority=0)
    d = enqueue_id(backend, priority=3)
    assert claimed_ids(backend, limit=3) == [a, b, c]
    assert claimed_ids(backend, limit=3) == [d]
    assert claimed_ids(backend, limit=3) == []


def test_future_job_is_not_claimed_until_the_clock_passes_it(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, run_at=clock.now() + timedelta(seconds=60))
    assert backend.claim("t") == []
    clock.advance(59)
    assert backend.claim("t") == []
    clock.advance(1)
    assert claimed_ids(backend) == [job_id]


def test_delayed_job_is_claimed_once_due(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, delay=5)
    assert backend.claim("t") == []
    clock.advance(5.001)
    assert claimed_ids(backend) == [job_id]


def test_a_future_job_does_not_block_due_jobs_behind_it(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend, priority=-100, run_at=clock.now() + timedelta(seconds=60))
    due = enqueue_id(backend, priority=100)
    assert claimed_ids(backend) == [due]


def test_claim_takes_only_the_asked_type(backend: Backend) -> None:
    a = enqueue_id(backend, "a")
    b = enqueue_id(backend, "b", priority=-1)
    assert claimed_ids(backend, "a") == [a]
    assert claimed_ids(backend, "a") == []
    assert get(backend, b).status == "pending"
    assert claimed_ids(backend, "b") == [b]
    assert claimed_ids(backend, "nothing-here") == []


def test_claimed_handle_is_an_active_snapshot_with_the_attempt_counted(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, data={"n": 1}, priority=4, max_attempts=2)
    clock.advance(3)
    handle = claim_one(backend)
    assert (handle.id, handle.type, handle.data) == (job_id, "t", {"n": 1})
    assert (handle.status, handle.attempts, handle.max_attempts, handle.priority) == (
        "active",
        1,
        2,
        4,
    )
    assert handle.claim_token
    stored = get(backend, job_id)
    assert (stored.status, stored.attempts) == ("active", 1)
    assert stored.updated_at == clock.now()


def test_each_claim_gets_a_fresh_token(backend: Backend) -> None:
    for n in range(3):
        enqueue_id(backend, data={"n": n})
    tokens = [h.claim_token for h in backend.claim("t", limit=3)]
    assert len(set(tokens)) == 3


def test_reclaiming_the_same_job_gets_a_new_token_and_another_attempt(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, max_attempts=5)
    first = claim_one(backend)
    assert first.fail("boom", retry_at=clock.now()) == "retry-scheduled"
    second = claim_one(backend)
    assert second.id == first.id
    assert second.claim_token != first.claim_token
    assert (first.attempts, second.attempts) == (1, 2)


def test_an_active_job_is_not_claimed_again(backend: Backend) -> None:
    enqueue_id(backend)
    claim_one(backend)
    assert backend.claim("t", limit=5) == []


def test_claim_limit_larger_than_the_backlog_takes_everything_due(backend: Backend) -> None:
    ids = [enqueue_id(backend, data={"n": n}) for n in range(3)]
    assert claimed_ids(backend, limit=50) == ids


# -- claim_next_by_key -----------------------------------------------------------------------


def test_claim_next_by_key_takes_the_pending_job_holding_the_key(backend: Backend) -> None:
    enqueue_id(backend, priority=-10)
    keyed = enqueue_id(backend, dedupe_key="k", priority=10)
    handle = backend.claim_next_by_key("t", "k")
    assert handle is not None
    assert (handle.id, handle.status, handle.attempts) == (keyed, "active", 1)
    assert backend.claim_next_by_key("t", "k") is None


def test_claim_next_by_key_ignores_other_types_and_keys(backend: Backend) -> None:
    enqueue_id(backend, "a", dedupe_key="k")
    enqueue_id(backend, "b", dedupe_key="other")
    assert backend.claim_next_by_key("b", "k") is None
    assert backend.claim_next_by_key("a", "other") is None
    assert backend.claim_next_by_key("a", "missing") is None


def test_claim_next_by_key_waits_for_a_future_job(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, dedupe_key="k", run_at=clock.now() + timedelta(seconds=30))
    assert backend.claim_next_by_key("t", "k") is None
    clock.advance(30)
    handle = backend.claim_next_by_key("t", "k")
    assert handle is not None and handle.id == job_id


def test_claim_next_by_key_skips_a_follower_while_the_key_runs(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    running = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert backend.claim_next_by_key("t", "k") is None
    assert get(backend, follower).attempts == 0
    assert running.complete() == "completed"
    handle = backend.claim_next_by_key("t", "k")
    assert handle is not None and handle.id == follower
