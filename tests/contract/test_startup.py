"""startup(): idempotent, safe on a store that already holds jobs, and what it creates
keeps dedupe working for every backend object over the same store."""

from __future__ import annotations

from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import (
    claim_one,
    enqueue,
    enqueue_id,
    get,
    second_view,
    unstarted_sibling,
)


def test_startup_twice_is_harmless(backend: Backend) -> None:
    backend.startup()
    backend.startup()
    job_id = enqueue_id(backend, dedupe_key="k")
    assert enqueue(backend, dedupe_key="k") is None
    assert claim_one(backend).id == job_id


def test_startup_on_a_store_that_already_holds_jobs_keeps_them(
    backend: Backend, clock: FakeClock
) -> None:
    pending = enqueue_id(backend, data={"n": 1}, dedupe_key="k1", priority=1)
    enqueue_id(backend, data={"n": 2})
    enqueue_id(backend, data={"n": 3})
    active = claim_one(backend)
    done = enqueue_id(backend, data={"n": 4}, dedupe_key="k2", priority=-1)
    claim_one(backend).complete()
    before = {j.id: j for j in backend.list_jobs()}

    other = second_view(backend, clock)
    try:
        other.startup()
        other.startup()
        backend.startup()
        assert {j.id: j for j in other.list_jobs()} == before
        assert get(other, pending).status == "pending"
        assert get(other, done).status == "completed"
        assert enqueue(other, dedupe_key="k1") is None  # dedupe still on
        assert enqueue(other, dedupe_key="k2") is not None
        assert other.complete(active.id, active.claim_token) == "completed"
        assert get(backend, active.id).status == "completed"
    finally:
        if other is not backend:
            other.close()


def test_first_startup_on_a_store_with_jobs_written_before_it(
    clock: FakeClock, backend: Backend
) -> None:
    store = unstarted_sibling(backend, clock)
    try:
        for n in range(3):
            enqueue_id(store, data={"n": n})  # no key: no slot field at all
        keyed = enqueue_id(store, dedupe_key="k")
        enqueue_id(store, dedupe_key="p", dedupe_scope="pending")
        store.startup()
        store.startup()
        assert store.count_jobs() == 5
        assert enqueue(store, dedupe_key="k") is None
        assert enqueue(store, dedupe_key="p", dedupe_scope="pending") is None
        assert get(store, keyed).status == "pending"
    finally:
        store.close()


def test_every_operation_works_right_after_startup(backend: Backend, clock: FakeClock) -> None:
    fresh = unstarted_sibling(backend, clock)
    try:
        fresh.startup()
        assert fresh.job_types() == []
        assert fresh.count_jobs() == 0
        assert fresh.list_jobs() == []
        assert fresh.get_stats().pending == 0
        assert fresh.claim("t") == []
        assert fresh.reap(30).handled == 0
        assert fresh.has_outstanding("t", "k") is False
    finally:
        fresh.close()


def test_after_startup_nothing_is_pending(backend: Backend) -> None:
    """What ``durabl migrate --check`` asks: once started, a store has no schema migration
    and nothing else of its setup left to do (MongoDB: every index in place)."""
    backend.startup()
    version = backend.schema_version()
    assert version is None or not version.pending
    assert backend.pending_setup() == ()
