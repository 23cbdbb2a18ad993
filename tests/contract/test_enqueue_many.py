"""Bulk enqueue (``queue.enqueue_many``): the outcome of each job as ``enqueue()`` one
after the other would give it, in order; every job checked before anything is written;
a chunk of up to 1,000 jobs per store operation."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from durabl import Child, DedupeScopeConflictError, JobQueue
from durabl.model.bulk import BULK_CHUNK
from durabl.model.options import NewJob, build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, get, second_view


def test_enqueue_many_returns_each_id_in_order_and_stores_each_job_with_its_options(
    queue: JobQueue, backend: Backend, clock: FakeClock
) -> None:
    later = clock.now() + timedelta(hours=1)
    ids = queue.enqueue_many(
        [
            ("resize", {"image": 1}),
            ("resize", {"image": 2}, {"priority": 5, "max_attempts": 7}),
            Child("email", {"to": "a@b"}, run_at=later),
            ("email", {"to": "c@d"}, {"delay": 60}),
        ]
    )
    assert len(ids) == 4 and all(ids) and len(set(ids)) == 4
    jobs = [get(backend, job_id or "") for job_id in ids]
    assert [(j.type, j.data) for j in jobs] == [
        ("resize", {"image": 1}),
        ("resize", {"image": 2}),
        ("email", {"to": "a@b"}),
        ("email", {"to": "c@d"}),
    ]
    assert [(j.priority, j.max_attempts) for j in jobs] == [(0, 3), (5, 7), (0, 3), (0, 3)]
    assert [j.run_at for j in jobs] == [
        clock.now(),
        clock.now(),
        later,
        clock.now() + timedelta(seconds=60),
    ]
    assert all(j.status == "pending" for j in jobs)


def test_enqueue_many_of_nothing_writes_nothing(queue: JobQueue) -> None:
    assert queue.enqueue_many([]) == []
    assert queue.count_jobs() == 0


@pytest.mark.parametrize("scope", ["pending+active", "pending"])
def test_a_slot_taken_by_a_stored_job_or_an_earlier_job_of_the_batch_gives_none(
    queue: JobQueue, backend: Backend, scope: str
) -> None:
    stored = queue.enqueue("t", 0, dedupe_key="k1", dedupe_scope=scope)
    ids = queue.enqueue_many(
        [
            ("t", 1, {"dedupe_key": "k1", "dedupe_scope": scope}),
            ("t", 2, {"dedupe_key": "k2", "dedupe_scope": scope}),
            ("t", 3, {"dedupe_key": "k2", "dedupe_scope": scope}),
            ("t", 4),
            Child("t", 5, dedupe_key="k3", dedupe_scope=scope),
        ]
    )
    assert [job_id is None for job_id in ids] == [True, False, True, False, False]
    assert [get(backend, job_id or "").data for job_id in ids if job_id] == [2, 4, 5]
    assert get(backend, stored or "").data == 0
    assert queue.count_jobs() == 4


def test_a_key_freed_before_the_batch_is_taken_again(queue: JobQueue, backend: Backend) -> None:
    """Scope ``pending``: a claimed job leaves its pending slot to a new job of its key."""
    queue.enqueue("t", 0, dedupe_key="k", dedupe_scope="pending")
    claim_one(backend)
    [job_id] = queue.enqueue_many([("t", 1, {"dedupe_key": "k", "dedupe_scope": "pending"})])
    assert job_id is not None and get(backend, job_id).data == 1


def test_coalescing_jobs_of_a_batch_coalesce_as_one_enqueue_after_the_other(
    queue: JobQueue, backend: Backend
) -> None:
    held = queue.enqueue("t", "old", dedupe_key="k")
    latest = {"dedupe_key": "k", "coalesce": "latest"}
    fresh = {"dedupe_key": "fresh", "coalesce": "latest"}
    ids = queue.enqueue_many(
        [
            ("t", "new", latest),
            ("t", "first", fresh),
            ("t", "plain", {"dedupe_key": "fresh"}),
            ("t", "second", fresh),
            ("t", "last", latest),
        ]
    )
    assert [job_id is None for job_id in ids] == [True, False, True, True, True]
    assert get(backend, held or "").data == "last"
    assert get(backend, ids[1] or "").data == "second"
    assert queue.count_jobs() == 2


def _bad_batches(clock: FakeClock) -> list[tuple[list[Any], type[Exception], str]]:
    naive = clock.now().replace(tzinfo=None)
    return [
        ([("t", 1), ("t", object())], TypeError, "job 1"),
        ([("t", 1), ("t", 2), ("", 3)], ValueError, "job 2"),
        ([("t", 1), ("t", 2, {"priority": "high"})], ValueError, "job 1: priority"),
        ([("t", 1), ("t", 2, {"run_at": naive})], ValueError, "job 1: run_at"),
        ([("t", 1), ("t", 2, {"max_attempts": 0})], ValueError, "job 1: max_attempts"),
        ([("t", 1), ("t", 2, {"connection": object()})], TypeError, "connection"),
        ([("t", 1), ("t", 2, {"prio": 1})], TypeError, "'prio'"),
        ([("t", 1), "t"], TypeError, "job 1"),
        ([("t", 1), ("t", 2, {"coalesce": "latest"})], ValueError, "job 1: coalesce"),
        (
            [
                ("t", 1, {"dedupe_key": "k"}),
                ("t", 2, {"dedupe_key": "k", "dedupe_scope": "pending"}),
            ],
            DedupeScopeConflictError,
            "job 1",
        ),
    ]


@pytest.mark.parametrize("case", range(10))
def test_one_invalid_job_raises_naming_it_and_nothing_is_written(
    queue: JobQueue, clock: FakeClock, case: int
) -> None:
    batch, error, says = _bad_batches(clock)[case]
    with pytest.raises(error, match=says):
        queue.enqueue_many(batch)
    assert queue.count_jobs() == 0


def test_a_key_live_under_the_other_scope_keeps_the_whole_chunk_out(
    queue: JobQueue, backend: Backend
) -> None:
    stored = queue.enqueue("t", 0, dedupe_key="k", dedupe_scope="pending")
    with pytest.raises(DedupeScopeConflictError):
        queue.enqueue_many([("t", 1), ("t", 2, {"dedupe_key": "k"}), ("t", 3)])
    assert [job.id for job in queue.list_jobs()] == [stored]


def _spy_inserts(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every chunk the store is asked to insert, in order."""
    sizes: list[int] = []
    insert_many: Callable[[Sequence[NewJob]], list[str | None]] = backend.insert_many  # type: ignore[attr-defined]

    def spy(jobs: Sequence[NewJob]) -> list[str | None]:
        sizes.append(len(jobs))
        return insert_many(jobs)

    monkeypatch.setattr(backend, "insert_many", spy)
    return sizes


def test_a_batch_over_a_thousand_jobs_is_written_a_chunk_at_a_time(
    queue: JobQueue, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _spy_inserts(backend, monkeypatch)
    batch = [("t", n, {"dedupe_key": f"k{n % (BULK_CHUNK + 3)}"}) for n in range(BULK_CHUNK + 5)]
    ids = queue.enqueue_many(batch)
    assert sizes == [BULK_CHUNK, 3]  # the last two repeat keys of the batch: never sent
    assert ids[-2:] == [None, None] and all(ids[:-2]) and len(set(ids[:-2])) == BULK_CHUNK + 3
    assert queue.count_jobs() == BULK_CHUNK + 3
    assert get(backend, ids[BULK_CHUNK + 2] or "").data == BULK_CHUNK + 2


def test_a_debounced_job_of_a_batch_pushes_the_pending_job_holding_its_key(
    queue: JobQueue, backend: Backend, clock: FakeClock
) -> None:
    """As ``enqueue(debounce=)`` one after the other: the first stores the job due
    ``debounce`` seconds later, a later one of the burst pushes it."""
    plain, first, second = queue.enqueue_many(
        [
            Child("t", 0, timeout=7),
            Child("t", 1, dedupe_key="k", debounce=10, timeout=5),
            Child("t", 2, dedupe_key="k", debounce=10),
        ]
    )
    assert plain is not None and first is not None and second is None
    assert get(backend, plain).timeout == 7  # written in the chunk, with its time limit
    assert get(backend, first).run_at == clock.now() + timedelta(seconds=10)
    assert get(backend, first).timeout == 5
    clock.advance(4)
    assert queue.enqueue_many([("t", 3, {"dedupe_key": "k", "debounce": 10})]) == [None]
    job = get(backend, first)
    assert (job.run_at, job.data) == (clock.now() + timedelta(seconds=10), 1)


def test_a_coalescing_job_splits_the_chunk_at_its_place(
    queue: JobQueue, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _spy_inserts(backend, monkeypatch)
    ids = queue.enqueue_many(
        [("t", 1), ("t", 2), ("t", 3, {"dedupe_key": "k", "coalesce": "latest"}), ("t", 4)]
    )
    assert sizes == [2, 1] and all(ids)


def test_each_job_of_a_batch_passes_the_enqueue_hooks_with_its_own_outcome(
    queue: JobQueue, backend: Backend
) -> None:
    seen: list[tuple[Any, str | None]] = []

    def stamp(job: NewJob, proceed: Callable[[NewJob], str | None]) -> str | None:
        job_id = proceed(job.with_trace_context({"n": str(job.data)}))
        seen.append((job.data, job_id))
        return job_id

    queue.add_enqueue_hook(stamp)
    ids = queue.enqueue_many([("t", n, {"dedupe_key": f"k{n % 3}"}) for n in range(5)])
    assert sorted(seen, key=lambda s: s[0]) == list(enumerate(ids))
    assert [job_id is None for job_id in ids] == [False, False, False, True, True]
    assert [get(backend, job_id or "").trace_context for job_id in ids[:3]] == [
        {"n": "0"},
        {"n": "1"},
        {"n": "2"},
    ]


def test_the_jobs_of_a_batch_are_claimed_in_priority_order(
    queue: JobQueue, backend: Backend
) -> None:
    ids = queue.enqueue_many([("t", n, {"priority": p}) for n, p in enumerate([3, 1, 2])])
    assert [claim_one(backend).id for _ in range(3)] == [ids[1], ids[2], ids[0]]


def test_batches_racing_over_the_same_keys_store_each_key_once(
    backend: Backend, clock: FakeClock
) -> None:
    """Four batches at once, on two store objects, each with the same 150 keys in its own
    order (none waits forever on another: the keys lock in one order) and 50 jobs without
    a key."""
    views = [backend, second_view(backend, clock)]
    keys = [f"k{n}" for n in range(150)]
    barrier = threading.Barrier(4)

    def batch(thread: int) -> list[str | None]:
        order = keys[thread * 37 :] + keys[: thread * 37]
        jobs = [build_new_job("t", key, dedupe_key=key) for key in order]
        jobs += [build_new_job("t", f"plain-{thread}-{n}") for n in range(50)]
        barrier.wait(timeout=10)
        return [r.job_id for r in views[thread % 2].enqueue_many(jobs)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(batch, range(4)))
    stored = [job_id for ids in results for job_id in ids if job_id is not None]
    assert len(stored) == len(set(stored)) == 150 + 4 * 50
    assert sorted(
        get(backend, job_id).data for job_id in stored if get(backend, job_id).data in keys
    ) == sorted(keys)
    assert all(ids[150:] == [i for i in ids[150:] if i is not None] for ids in results)
