"""Thread safety and several backend objects over one store: claims are exclusive, dedupe
admits one job per slot, and a scope conflict never leaves a key live under both scopes,
whoever races whom."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from durabl import DedupeScopeConflictError
from durabl.model.options import build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue, enqueue_id, get, second_view

THREADS = 6
R = TypeVar("R")


@pytest.fixture
def views(backend: Backend, clock: FakeClock) -> Iterator[list[Backend]]:
    """The fixture's backend and a second object over the same store (for a file-backed
    store: its own connections, as another process would have)."""
    other = second_view(backend, clock)
    yield [backend, other]
    if other is not backend:
        other.close()


def race(views: list[Backend], fn: Callable[[Backend, int], R], n: int = THREADS) -> list[R]:
    """Run ``fn(view, i)`` on ``n`` threads released together; results in thread order."""
    barrier = threading.Barrier(n)

    def run(i: int) -> R:
        barrier.wait(timeout=10)
        return fn(views[i % len(views)], i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(run, range(n)))


def test_two_backend_objects_over_one_store_see_the_same_jobs(views: list[Backend]) -> None:
    first, second = views
    job_id = enqueue_id(first, dedupe_key="k")
    assert enqueue(second, dedupe_key="k") is None
    handle = claim_one(second)
    assert handle.id == job_id
    assert first.claim("t") == []
    assert first.complete(job_id, handle.claim_token) == "completed"
    assert get(second, job_id).status == "completed"
    assert second.complete(job_id, handle.claim_token) == "completed"  # the receipt


def test_concurrent_claims_never_hand_out_a_job_twice(views: list[Backend]) -> None:
    ids = {enqueue_id(views[0], data={"n": n}) for n in range(24)}

    def drain(view: Backend, i: int) -> list[str]:
        got: list[str] = []
        while handles := view.claim("t", limit=1 + i % 3):
            got.extend(h.id for h in handles)
        return got

    claimed = [job_id for got in race(views, drain) for job_id in got]
    assert sorted(claimed) == sorted(ids)
    assert views[0].count_jobs(status="active") == 24


@pytest.mark.parametrize("scope", ["pending+active", "pending"])
def test_concurrent_enqueues_of_one_key_accept_exactly_one(
    views: list[Backend], scope: str
) -> None:
    results = race(
        views, lambda view, i: enqueue(view, data={"i": i}, dedupe_key="k", dedupe_scope=scope)
    )
    accepted = [r for r in results if r is not None]
    assert len(accepted) == 1
    assert views[0].count_jobs() == 1


def test_concurrent_enqueues_under_both_scopes_never_leave_a_key_under_both(
    views: list[Backend],
) -> None:
    for round_ in range(5):
        key = f"k{round_}"

        def attempt(view: Backend, i: int, key: str = key) -> str | None:
            scope = "pending" if i % 2 else "pending+active"
            try:
                return enqueue(view, data={"i": i}, dedupe_key=key, dedupe_scope=scope)
            except DedupeScopeConflictError:
                return None

        accepted = [r for r in race(views, attempt) if r is not None]
        live = [j for j in views[0].list_jobs(search=key) if j.dedupe_key == key]
        assert {j.id for j in live} == set(accepted)
        assert len({j.dedupe_scope for j in live}) <= 1, live
        assert len(live) <= 1  # no job of either scope has been claimed: one pending at most


def test_concurrent_inline_claims_of_one_key_run_once(views: list[Backend]) -> None:
    def attempt(view: Backend, i: int) -> Any:
        return view.claim_or_enqueue(build_new_job("t", {"i": i}, dedupe_key="k"), f"w{i}")

    results = race(views, attempt)
    handles = [r.handle for r in results if r.handle is not None]
    assert len(handles) == 1
    assert all(r.enqueued_id is None for r in results)
    assert views[0].count_jobs() == 1


def test_concurrent_completes_with_one_handle_all_report_completed(
    views: list[Backend],
) -> None:
    enqueue_id(views[0])
    handle = claim_one(views[0])
    results = race(views, lambda view, i: view.complete(handle.id, handle.claim_token))
    assert [r.status for r in results] == ["completed"] * THREADS


def test_concurrent_fail_and_complete_on_one_claim_apply_exactly_one(
    views: list[Backend], clock: FakeClock
) -> None:
    enqueue_id(views[0], max_attempts=3)
    handle = claim_one(views[0])

    def write(view: Backend, i: int) -> str:
        if i % 2:
            return view.complete(handle.id, handle.claim_token).status
        return view.fail(handle.id, handle.claim_token, "x", retry_at=clock.now()).status

    results = race(views, write)
    job = get(views[0], handle.id)
    if job.status == "completed":
        assert {r for i, r in enumerate(results) if i % 2} == {"completed"}
        assert {r for i, r in enumerate(results) if not i % 2} == {"already-terminal"}
    else:
        assert job.status == "pending"
        assert {r for i, r in enumerate(results) if not i % 2} == {"retry-scheduled"}
        assert {r for i, r in enumerate(results) if i % 2} == {"lease-lost"}
