"""Debounce: a burst of enqueues of one dedupe key leaves one pending job, due ``debounce``
seconds after the burst's last enqueue (never later than its first + ``debounce_max``);
an active job is never moved; racing enqueues leave one job at the latest instant."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from durabl import JobQueue
from durabl.model.job import Job
from durabl.model.options import build_new_job
from durabl.stores.base import Backend, EnqueueResult
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue_id, get, second_view

THREADS = 6


def debounced(backend: Backend, data: Any = None, **options: Any) -> EnqueueResult:
    """A debounced enqueue of key ``k`` (10 s unless told) at the store's now."""
    options = {"dedupe_key": "k", "debounce": 10, **options}
    new = build_new_job("t", {} if data is None else data, now=backend.now(), **options)
    return backend.enqueue(new)


def test_first_debounced_enqueue_is_due_debounce_seconds_later(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = debounced(backend).job_id
    assert job_id is not None
    assert get(backend, job_id).run_at == clock.now() + timedelta(seconds=10)
    assert backend.claim("t") == []  # not due during the quiet period


def test_a_burst_leaves_one_job_due_debounce_after_its_last_enqueue(
    backend: Backend, clock: FakeClock
) -> None:
    first = debounced(backend, {"n": 0})
    assert first.job_id is not None
    for n in range(1, 5):
        clock.advance(3)
        later = debounced(backend, {"n": n})
        # As a taken slot always answers: no new id (the first enqueue returned it).
        assert (later.job_id, later.debounced, later.coalesced) == (None, True, False)
    job = get(backend, first.job_id)
    assert job.run_at == clock.now() + timedelta(seconds=10)
    assert job.data == {"n": 0}  # without coalesce the first payload stays
    assert job.updated_at == clock.now()
    assert job.created_at == clock.now() - timedelta(seconds=12)
    assert backend.count_jobs() == 1


def test_coalesce_latest_with_debounce_takes_the_newest_payload(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = debounced(backend, {"n": 1}, coalesce="latest").job_id
    assert job_id is not None
    clock.advance(4)
    later = debounced(backend, {"n": 2}, coalesce="latest")
    assert (later.job_id, later.debounced, later.coalesced) == (None, True, True)
    job = get(backend, job_id)
    assert (job.data, job.run_at) == ({"n": 2}, clock.now() + timedelta(seconds=10))


@pytest.mark.parametrize("scope", ["pending+active", "pending"])
def test_debounce_max_bounds_the_push_past_the_first_enqueue(
    backend: Backend, clock: FakeClock, scope: str
) -> None:
    start = clock.now()
    job_id = debounced(backend, dedupe_scope=scope, debounce_max=25).job_id
    assert job_id is not None
    clock.advance(8)
    debounced(backend, dedupe_scope=scope, debounce_max=25)
    assert get(backend, job_id).run_at == start + timedelta(seconds=18)  # within the bound
    clock.advance(8)
    debounced(backend, dedupe_scope=scope, debounce_max=25)
    assert get(backend, job_id).run_at == start + timedelta(seconds=25)  # held at the bound
    clock.advance(20)  # past the bound: the job is due and stays so
    assert debounced(backend, dedupe_scope=scope, debounce_max=25).debounced
    assert get(backend, job_id).run_at == start + timedelta(seconds=25)
    assert claim_one(backend).id == job_id


def test_a_push_never_makes_a_job_due_earlier(backend: Backend, clock: FakeClock) -> None:
    later = clock.now() + timedelta(hours=1)
    job_id = enqueue_id(backend, dedupe_key="k", run_at=later)
    assert debounced(backend).debounced
    assert get(backend, job_id).run_at == later


def test_an_active_job_is_never_moved(backend: Backend, clock: FakeClock) -> None:
    job_id = debounced(backend, {"n": 1}, coalesce="latest").job_id
    clock.advance(10)
    assert claim_one(backend).id == job_id
    refused = debounced(backend, {"n": 2}, coalesce="latest")
    assert (refused.job_id, refused.debounced, refused.coalesced) == (None, False, False)
    job = get(backend, job_id)
    assert (job.status, job.data, job.run_at) == ("active", {"n": 1}, clock.now())
    assert backend.count_jobs() == 1


def test_pending_scope_debounces_the_follower_of_an_active_run(
    backend: Backend, clock: FakeClock
) -> None:
    active = debounced(backend, dedupe_scope="pending").job_id
    clock.advance(10)
    assert claim_one(backend).id == active
    follower = debounced(backend, dedupe_scope="pending").job_id
    assert follower is not None and follower != active
    clock.advance(5)
    assert debounced(backend, dedupe_scope="pending").debounced
    assert get(backend, follower).run_at == clock.now() + timedelta(seconds=10)
    assert get(backend, active).run_at == clock.now() - timedelta(seconds=5)


def test_a_pending_job_of_another_type_is_not_moved(backend: Backend, clock: FakeClock) -> None:
    other = enqueue_id(backend, "other", dedupe_key="k", delay=10)
    clock.advance(5)
    assert debounced(backend).debounced is False
    assert get(backend, other).run_at == clock.now() + timedelta(seconds=5)


@pytest.mark.parametrize("debounce_max", [None, 60.0], ids=["unbounded", "bounded"])
def test_racing_debounced_enqueues_leave_one_job_at_the_latest_instant(
    backend: Backend, clock: FakeClock, debounce_max: float | None
) -> None:
    views = [backend, second_view(backend, clock)]
    start = clock.now()
    barrier = threading.Barrier(THREADS)

    def enqueue_at(i: int) -> str | None:
        # Each racer enqueues as if at its own instant, start + i seconds.
        now = start + timedelta(seconds=i)
        new = build_new_job(
            "t", {"n": i}, dedupe_key="k", debounce=10, debounce_max=debounce_max, now=now
        )
        barrier.wait(timeout=10)
        return views[i % 2].enqueue(new).job_id

    for _ in range(3):  # several rounds: the push must win whatever order they write in
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            ids = [job_id for job_id in pool.map(enqueue_at, range(THREADS)) if job_id]
        jobs = backend.list_jobs()
        assert len(jobs) == 1 and len(ids) <= 1
        assert jobs[0].run_at == start + timedelta(seconds=THREADS - 1 + 10)


def test_the_debounced_job_runs_once_after_the_burst(queue: JobQueue, clock: FakeClock) -> None:
    runs: list[Job[Any]] = []
    queue.register("t", lambda job, ctx: runs.append(job))
    first = queue.enqueue("t", {"n": 0}, dedupe_key="k", debounce=5, coalesce="latest")
    for n in range(1, 4):
        clock.advance(2)
        assert queue.enqueue("t", {"n": n}, dedupe_key="k", debounce=5, coalesce="latest") is None
        assert queue.run_pending("t") == 0  # still inside the burst
    clock.advance(5)
    assert queue.run_pending("t") == 1
    assert [(job.id, job.data) for job in runs] == [(first, {"n": 3})]
    assert queue.run_pending("t") == 0


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"debounce": 5}, "debounce needs a dedupe_key"),
        ({"dedupe_key": "k", "debounce": 0}, "debounce must be a positive"),
        ({"dedupe_key": "k", "debounce": -1}, "debounce must not be negative"),
        ({"dedupe_key": "k", "debounce": "5"}, "debounce must be a number of seconds"),
        ({"dedupe_key": "k", "debounce": 400 * 86400}, "debounce must be at most"),
        ({"dedupe_key": "k", "debounce": 5, "debounce_max": 4}, "must not be less than"),
        ({"dedupe_key": "k", "debounce": 5, "debounce_max": 0}, "debounce_max must be a positive"),
        ({"dedupe_key": "k", "debounce_max": 60}, "debounce_max bounds a debounce"),
        ({"dedupe_key": "k", "debounce": 5, "delay": 3}, "pass debounce, or delay/run_at"),
        (
            {"dedupe_key": "k", "debounce": 5, "run_at": datetime(2031, 1, 1, tzinfo=timezone.utc)},
            "pass debounce, or delay/run_at",
        ),
    ],
)
def test_bad_debounce_options_raise_value_error_and_write_nothing(
    queue: JobQueue, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        queue.enqueue("t", {}, **options)
    assert queue.count_jobs() == 0


def test_a_bad_debounce_leaves_the_pending_job_as_it_was(queue: JobQueue, clock: FakeClock) -> None:
    job_id = queue.enqueue("t", {"n": 1}, dedupe_key="k", debounce=5)
    assert job_id is not None
    with pytest.raises(ValueError):
        queue.enqueue("t", {"n": 2}, dedupe_key="k", debounce=5, debounce_max=1, coalesce="latest")
    job = get(queue.backend, job_id)
    assert (job.data, job.run_at) == ({"n": 1}, clock.now() + timedelta(seconds=5))
