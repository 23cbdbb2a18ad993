"""Flow control on every store: per-key concurrency limits at claim time (no attempts
used by a held-back job, other keys unaffected, the slot freed by every way out of
``active``), and per-type rate limits counted in epoch-aligned windows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from durabl.model.flow import RATE_LIMITS_REFRESH, RateLimit
from durabl.model.options import build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, enqueue, enqueue_id, expire_leases, get, second_view


def claim_ids(backend: Backend, type: str = "t", limit: int = 100) -> list[str]:
    return [h.id for h in backend.claim(type, limit=limit, lease_owner="flow")]


# -- concurrency keys -----------------------------------------------------------------------
def test_a_key_at_its_limit_holds_its_other_jobs_back(backend: Backend) -> None:
    first = enqueue_id(backend, concurrency_key="customer:42", data={"n": 1})
    second = enqueue_id(backend, concurrency_key="customer:42", data={"n": 2})
    assert claim_ids(backend) == [first]
    assert claim_ids(backend) == []
    held = get(backend, second)
    assert held.status == "pending"
    assert held.attempts == 0


def test_other_keys_and_unkeyed_jobs_proceed(backend: Backend) -> None:
    a1 = enqueue_id(backend, concurrency_key="a", data={"n": 1})
    enqueue_id(backend, concurrency_key="a", data={"n": 2})
    b1 = enqueue_id(backend, concurrency_key="b", data={"n": 3})
    free = enqueue_id(backend, data={"n": 4})
    assert sorted(claim_ids(backend)) == sorted([a1, b1, free])


def test_a_limit_above_one_lets_that_many_run(backend: Backend) -> None:
    ids = [
        enqueue_id(backend, concurrency_key="k", concurrency_limit=2, data={"n": n})
        for n in range(5)
    ]
    assert claim_ids(backend) == ids[:2]
    assert claim_ids(backend) == []


def test_the_key_counts_across_types(backend: Backend) -> None:
    one = enqueue_id(backend, "t1", concurrency_key="shared")
    enqueue_id(backend, "t2", concurrency_key="shared")
    assert claim_ids(backend, "t1") == [one]
    assert claim_ids(backend, "t2") == []


def test_the_limit_stored_with_each_job_applies_when_it_is_claimed(backend: Backend) -> None:
    wide = enqueue_id(backend, concurrency_key="k", concurrency_limit=3, data={"n": 1})
    narrow = enqueue_id(backend, concurrency_key="k", concurrency_limit=1, data={"n": 2})
    wide2 = enqueue_id(backend, concurrency_key="k", concurrency_limit=3, data={"n": 3})
    # The narrow job cannot start beside the wide one; the next wide one can.
    assert claim_ids(backend) == [wide, wide2]
    assert get(backend, narrow).status == "pending"


# Mixed limits on one key: each job's own limit decides when it starts (docs/flow-control.md).
def test_a_narrow_job_held_beside_a_wide_one_starts_once_the_key_drains(
    backend: Backend,
) -> None:
    enqueue_id(backend, concurrency_key="k", concurrency_limit=3, data={"n": 1})
    (wide,) = backend.claim("t", limit=1, lease_owner="flow")
    narrow = enqueue_id(backend, concurrency_key="k", concurrency_limit=1, data={"n": 2})
    wide2 = enqueue_id(backend, concurrency_key="k", concurrency_limit=3, data={"n": 3})
    # The narrow job waits for the key to be free; the wide one behind it has room.
    (second,) = backend.claim("t", limit=10, lease_owner="flow")
    assert second.id == wide2
    assert backend.complete(wide.id, wide.claim_token).status == "completed"
    assert claim_ids(backend) == []  # one wide job still holds the key
    assert backend.complete(second.id, second.claim_token).status == "completed"
    assert claim_ids(backend) == [narrow]
    assert get(backend, narrow).attempts == 1


def test_a_wide_job_is_not_held_behind_a_narrow_one_that_waits(backend: Backend) -> None:
    enqueue_id(backend, concurrency_key="k", concurrency_limit=2, data={"n": 1})
    assert len(claim_ids(backend, limit=1)) == 1
    narrow = enqueue_id(backend, concurrency_key="k", concurrency_limit=1, data={"n": 2})
    wide = enqueue_id(backend, concurrency_key="k", concurrency_limit=3, data={"n": 3})
    assert claim_ids(backend) == [wide]
    assert get(backend, narrow).status == "pending"


def test_a_narrow_job_does_not_start_beside_a_wide_one_from_another_store_object(
    backend: Backend, clock: FakeClock
) -> None:
    """The wide job left holding the key has the key's second slot, not its first: the
    narrow job's own slot is free, yet it must wait (a store object meeting its first
    keyed job included)."""
    first = enqueue_id(backend, concurrency_key="k", concurrency_limit=3, data={"n": 1})
    enqueue_id(backend, concurrency_key="k", concurrency_limit=3, data={"n": 2})
    handles = {h.id: h for h in backend.claim("t", limit=2, lease_owner="flow")}
    assert len(handles) == 2
    done = handles.pop(first)
    assert backend.complete(done.id, done.claim_token).status == "completed"
    narrow = enqueue_id(backend, concurrency_key="k", concurrency_limit=1, data={"n": 3})
    other = second_view(backend, clock)
    assert claim_ids(other) == []
    assert get(backend, narrow).status == "pending"
    assert get(backend, narrow).attempts == 0
    (wide,) = handles.values()
    assert backend.complete(wide.id, wide.claim_token).status == "completed"
    assert claim_ids(other) == [narrow]


def test_a_key_with_mixed_limits_always_drains(backend: Backend) -> None:
    """No job of a key waits forever: whatever the mix of limits, a claim finds a job as
    long as any is pending and fewer than its limit run; each starts only while fewer than
    its own limit hold the key, and at most ``l`` jobs of limit ``l`` or lower are active."""
    limits = [1, 3, 2, 1, 3, 3, 2, 1, 2, 3, 1, 1, 3, 2, 2, 3]
    ids = {
        enqueue_id(backend, concurrency_key="k", concurrency_limit=n, data={"i": i}): n
        for i, n in enumerate(limits)
    }
    active: list[Any] = []
    done: set[str] = set()
    for _ in range(4 * len(limits)):
        for handle in backend.claim("t", limit=2, lease_owner="flow"):
            assert len(active) < ids[handle.id], "started beside its own limit of runs"
            active.append(handle)
        for bound in set(limits):
            assert sum(ids[h.id] <= bound for h in active) <= bound
        if not active:
            break  # nothing runs, so nothing pending may be left behind
        oldest = active.pop(0)
        assert backend.complete(oldest.id, oldest.claim_token).status == "completed"
        done.add(oldest.id)
    assert done == set(ids), "jobs left pending with nothing running"


def test_completion_frees_the_slot(backend: Backend) -> None:
    first = enqueue_id(backend, concurrency_key="k", data={"n": 1})
    second = enqueue_id(backend, concurrency_key="k", data={"n": 2})
    (handle,) = backend.claim("t", limit=10)
    assert backend.complete(handle.id, handle.claim_token).status == "completed"
    assert handle.id == first
    assert claim_ids(backend) == [second]


@pytest.mark.parametrize("outcome", ["retry", "fatal", "release"])
def test_every_outcome_frees_the_slot(backend: Backend, outcome: str) -> None:
    first = enqueue_id(backend, concurrency_key="k", data={"n": 1})
    second = enqueue_id(backend, concurrency_key="k", data={"n": 2}, priority=1)
    (handle,) = backend.claim("t", limit=10)
    if outcome == "retry":
        backend.fail(
            handle.id, handle.claim_token, "boom", retry_at=backend.now() + timedelta(hours=1)
        )
    elif outcome == "fatal":
        backend.fail_fatal(handle.id, handle.claim_token, "boom")
    else:
        backend.release(handle.id, handle.claim_token, run_at=backend.now() + timedelta(hours=1))
    assert get(backend, first).status != "active"
    assert claim_ids(backend) == [second]


def test_the_reaper_frees_the_slot_of_a_dead_worker(backend: Backend, clock: FakeClock) -> None:
    first = enqueue_id(backend, concurrency_key="k", data={"n": 1})
    second = enqueue_id(backend, concurrency_key="k", data={"n": 2})
    assert claim_ids(backend) == [first]
    expire_leases(clock, backend)
    backend.reap(VT)
    assert get(backend, first).status == "pending"
    (again,) = claim_ids(backend)  # one of the two: the key has room for one again
    assert {get(backend, first).status, get(backend, second).status} == {"active", "pending"}
    assert again in (first, second)


def test_the_limit_holds_across_store_objects(backend: Backend, clock: FakeClock) -> None:
    other = second_view(backend, clock)
    first = enqueue_id(backend, concurrency_key="k", data={"n": 1})
    enqueue_id(backend, concurrency_key="k", data={"n": 2})
    assert claim_ids(other) == [first]
    assert claim_ids(backend) == []


def test_a_held_back_job_is_not_written_by_polls(backend: Backend) -> None:
    enqueue_id(backend, concurrency_key="k", data={"n": 1})
    second = enqueue_id(backend, concurrency_key="k", data={"n": 2})
    claim_ids(backend)
    before = get(backend, second)
    for _ in range(5):
        assert claim_ids(backend) == []
    after = get(backend, second)
    assert after.updated_at == before.updated_at
    assert after.attempts == 0


def test_claim_next_by_key_respects_the_concurrency_key(backend: Backend) -> None:
    enqueue_id(backend, concurrency_key="k", data={"n": 1})
    enqueue_id(backend, concurrency_key="k", dedupe_key="d", data={"n": 2})
    assert len(claim_ids(backend, limit=1)) == 1
    assert backend.claim_next_by_key("t", "d") is None


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"concurrency_key": 42}, ValueError),
        ({"concurrency_key": ""}, ValueError),
        ({"concurrency_key": "k", "concurrency_limit": 0}, ValueError),
        ({"concurrency_key": "k", "concurrency_limit": True}, ValueError),
        ({"concurrency_key": "k", "concurrency_limit": 1.5}, ValueError),
        ({"concurrency_limit": 2}, ValueError),
    ],
)
def test_bad_concurrency_options_are_refused_before_a_write(
    backend: Backend, options: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        enqueue(backend, **options)
    assert backend.count_jobs() == 0


# -- rate limits ----------------------------------------------------------------------------
def at_window_start(clock: FakeClock, per: float) -> None:
    """Move the fake clock to the start of the next window of ``per`` seconds."""
    end = RateLimit.of(1, per).window_end(clock.now())
    clock.advance((end - clock.now()).total_seconds())


def test_a_rate_limit_is_stored_and_removed(backend: Backend) -> None:
    assert backend.get_rate_limit("t") is None
    backend.set_rate_limit("t", 5, 2)
    assert backend.get_rate_limit("t") == RateLimit(5, 2.0)
    backend.set_rate_limit("t", 3, timedelta(minutes=1))
    assert backend.get_rate_limit("t") == RateLimit(3, 60.0)
    assert backend.get_rate_limit("other") is None
    backend.set_rate_limit("t", None)
    assert backend.get_rate_limit("t") is None


def test_at_most_limit_jobs_start_in_a_window(backend: Backend, clock: FakeClock) -> None:
    backend.set_rate_limit("t", 2, 10)
    at_window_start(clock, 10)
    ids = [enqueue_id(backend, data={"n": n}) for n in range(5)]
    assert claim_ids(backend) == ids[:2]
    clock.advance(9.9)
    assert claim_ids(backend) == []
    assert [get(backend, i).attempts for i in ids[2:]] == [0, 0, 0]
    clock.advance(0.1)  # the next window
    assert claim_ids(backend) == ids[2:4]


def test_the_rate_limit_counts_across_store_objects(backend: Backend, clock: FakeClock) -> None:
    other = second_view(backend, clock)
    backend.set_rate_limit("t", 3, 60)
    at_window_start(clock, 60)
    for n in range(6):
        enqueue_id(backend, data={"n": n})
    assert other.get_rate_limit("t") == RateLimit(3, 60.0)
    assert len(claim_ids(backend, limit=2)) == 2
    assert len(claim_ids(other, limit=5)) == 1
    assert claim_ids(backend) == []


def test_a_limit_set_by_another_store_object_applies_within_the_refresh(
    backend: Backend, clock: FakeClock
) -> None:
    """Another process's limit holds here at the latest RATE_LIMITS_REFRESH seconds after
    it was set (a store object that has claimed the type reads the list of limited types
    again only that often; see docs/flow-control.md)."""
    other = second_view(backend, clock)
    at_window_start(clock, 600)
    for n in range(8):
        enqueue_id(backend, data={"n": n})
    assert len(claim_ids(other, limit=1)) == 1  # other has claimed the type: no limit
    backend.set_rate_limit("t", 2, 600)
    clock.advance(RATE_LIMITS_REFRESH)
    claimed = claim_ids(other, limit=10)
    assert len(claimed) == 2  # counted in the window from here on
    assert claim_ids(other) == []
    assert claim_ids(backend) == []


def test_a_claim_reading_an_older_clock_cannot_reopen_a_window(
    backend: Backend, clock: FakeClock
) -> None:
    """A claimer whose clock reads the previous window after another counted in the next
    (its transaction began before it waited for the row, or its process's clock lags)
    starts nothing: counting there would reset the window, and the newer window would
    then let in its limit once more (seen as 8 starts in one second under a limit of 4,
    two processes on SQLite)."""
    backend.set_rate_limit("t", 2, 1)
    at_window_start(clock, 1)
    clock.advance(0.9)
    ids = [enqueue_id(backend, data={"n": n}) for n in range(6)]
    lagging = second_view(backend, FakeClock(clock.now()))  # stays in this window
    if lagging is backend:
        pytest.skip("a store inside one object reads one clock")
    clock.advance(0.2)  # the next window
    assert len(claim_ids(lagging, limit=1)) == 1  # its own window: one start of two
    assert claim_ids(backend, limit=1) == ids[1:2]  # the next window's first start
    assert claim_ids(lagging) == []  # the stored window is newer than its clock
    assert claim_ids(backend) == ids[2:3]  # the newer window holds its limit of two
    assert claim_ids(backend) == []


def test_a_rate_limit_applies_to_its_type_only(backend: Backend, clock: FakeClock) -> None:
    backend.set_rate_limit("slow", 1, 60)
    at_window_start(clock, 60)
    for n in range(3):
        enqueue_id(backend, "slow", data={"n": n})
        enqueue_id(backend, "fast", data={"n": n})
    assert len(claim_ids(backend, "slow")) == 1
    assert len(claim_ids(backend, "fast")) == 3


def test_removing_the_limit_lets_the_backlog_start(backend: Backend, clock: FakeClock) -> None:
    backend.set_rate_limit("t", 1, 60)
    at_window_start(clock, 60)
    for n in range(3):
        enqueue_id(backend, data={"n": n})
    assert len(claim_ids(backend)) == 1
    backend.set_rate_limit("t", None)
    assert len(claim_ids(backend)) == 2


def test_windows_are_aligned_to_the_epoch() -> None:
    rate = RateLimit.of(1, 60)
    now = datetime(2026, 1, 1, 12, 0, 42, 500000, tzinfo=timezone.utc)
    assert rate.window_start(now) == datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert rate.window_end(now) == datetime(2026, 1, 1, 12, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("limit", "per"),
    [(0, 1), (-1, 1), (1.5, 1), (True, 1), ("3", 1), (1, 0), (1, -1), (1, None), (1, "x")],
)
def test_bad_rate_limits_are_refused_before_a_write(
    backend: Backend, limit: object, per: object
) -> None:
    with pytest.raises(ValueError):
        backend.set_rate_limit("t", limit, per)  # type: ignore[arg-type]
    assert backend.get_rate_limit("t") is None


def test_an_inline_claim_waits_for_its_key(backend: Backend) -> None:
    first = enqueue_id(backend, concurrency_key="k", data={"n": 1})
    assert claim_ids(backend) == [first]
    new = build_new_job("t", {"n": 2}, concurrency_key="k", now=backend.now())
    result = backend.claim_or_enqueue(new, "inline")
    assert result.handle is None
    assert result.enqueued_id is not None
    assert get(backend, result.enqueued_id).status == "pending"
    free = build_new_job("t", {"n": 3}, concurrency_key="other", now=backend.now())
    assert backend.claim_or_enqueue(free, "inline").handle is not None


def test_a_reaped_job_claims_a_slot_afresh(backend: Backend, clock: FakeClock) -> None:
    first = enqueue_id(backend, concurrency_key="k", concurrency_limit=2, data={"n": 1})
    assert claim_ids(backend) == [first]
    second = enqueue_id(backend, concurrency_key="k", concurrency_limit=2, data={"n": 2})
    expire_leases(clock, backend)
    backend.reap(VT)
    assert sorted(claim_ids(backend)) == sorted([first, second])
