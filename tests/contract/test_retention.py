"""Retention: prune() deletes jobs that finished before now - older_than, in the statuses
named (completed, superseded and cancelled by default: failed jobs are kept unless named);
JobQueue(retention=...) prunes on every reaper sweep."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durabl import JobQueue
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import enqueue_id, get


def finished(backend: Backend, clock: FakeClock) -> dict[str, str]:
    """One job in each terminal status (and one pending, one active), by status."""
    ids = {}
    ids["completed"] = enqueue_id(backend)
    (h,) = backend.claim("t")
    h.complete()
    ids["failed"] = enqueue_id(backend)
    (h,) = backend.claim("t")
    h.fail_fatal("E: no")
    ids["cancelled"] = enqueue_id(backend)
    backend.cancel(ids["cancelled"])
    first = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    (h,) = backend.claim("t")
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert h.release() == "superseded"
    ids["superseded"] = first
    ids["active"] = enqueue_id(backend, type="other")
    backend.claim("other")
    ids["pending"] = enqueue_id(backend, type="waiting", delay=3600)
    return ids


def test_prune_deletes_old_finished_jobs_in_the_default_statuses(
    backend: Backend, clock: FakeClock
) -> None:
    ids = finished(backend, clock)
    assert backend.prune(older_than=60) == 0  # nothing is a minute old yet
    clock.advance(61)
    fresh = enqueue_id(backend, type="fresh")
    (h,) = backend.claim("fresh")
    h.complete()
    assert backend.prune(older_than=60) == 3
    gone = {s for s, job_id in ids.items() if backend.get_job(job_id) is None}
    assert gone == {"completed", "superseded", "cancelled"}
    assert get(backend, fresh).status == "completed"  # finished a moment ago
    assert backend.prune(older_than=timedelta(seconds=60), statuses=["failed"]) == 1
    assert backend.get_job(ids["failed"]) is None
    assert {get(backend, ids[s]).status for s in ("active", "pending")} == {"active", "pending"}


def test_prune_refuses_bad_arguments_and_deletes_nothing(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend)
    (h,) = backend.claim("t")
    h.complete()
    clock.advance(100)
    for bad in (0, -5, timedelta(0)):
        with pytest.raises(ValueError, match="older_than"):
            backend.prune(older_than=bad)
    with pytest.raises(ValueError, match="terminal"):
        backend.prune(older_than=1, statuses=["pending"])
    with pytest.raises(ValueError, match="terminal"):
        backend.prune(older_than=1, statuses=[])
    with pytest.raises(TypeError):
        backend.prune(older_than=1, statuses="completed")
    with pytest.raises(ValueError, match="older_than"):
        backend.prune(older_than="soon")  # type: ignore[arg-type]
    assert get(backend, job_id).status == "completed"


def test_every_reaper_sweep_prunes_with_the_queue_retention(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock, retention=3600)
    job_id = enqueue_id(backend)
    (h,) = backend.claim("t")
    h.complete()
    queue.reap_once()
    assert get(backend, job_id).status == "completed"
    clock.advance(3601)
    queue.reap_once()
    assert backend.get_job(job_id) is None


def test_a_queue_refuses_a_retention_that_is_not_positive(backend: Backend) -> None:
    with pytest.raises(ValueError, match="retention"):
        JobQueue(backend, retention=0)
    assert queue_prune_deletes_nothing_by_default(backend) == 0


def queue_prune_deletes_nothing_by_default(backend: Backend) -> int:
    return JobQueue(backend).prune(older_than=1)
