"""Pausing a job type on every store: no claim takes its jobs (worker polls, key drains,
inline runs), enqueue keeps working, running jobs finish, another process stops claiming it
too (within the refresh of a MongoDB process's set), stats and lag alarms show it, and
resuming lets the jobs run again."""

from __future__ import annotations

from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue
from durabl.model.pauses import PAUSED_RECHECK, PAUSED_TYPES_REFRESH
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue_id, get, second_view


def noop(job: Job[Any], ctx: JobContext) -> str:
    return "ran"


def test_a_paused_type_is_not_claimed_and_still_enqueued_until_resumed(
    backend: Backend, queue: JobQueue
) -> None:
    queue.pause("t")
    job_id = enqueue_id(backend, "t")
    other = enqueue_id(backend, "other")
    assert backend.claim("t", limit=5) == []
    assert get(backend, job_id).status == "pending"
    assert claim_one(backend, "other").id == other  # only the paused type stops

    queue.resume("t")
    assert claim_one(backend, "t").id == job_id


def test_paused_types_are_listed_sorted_and_a_pause_or_resume_twice_is_one(
    backend: Backend, queue: JobQueue
) -> None:
    assert queue.paused_types() == []
    queue.pause("zeta")
    queue.pause("alpha")
    queue.pause("zeta")
    assert queue.paused_types() == ["alpha", "zeta"]
    queue.resume("zeta")
    queue.resume("zeta")
    queue.resume("never-paused")
    assert queue.paused_types() == ["alpha"]


def test_a_job_running_when_its_type_is_paused_finishes(backend: Backend, queue: JobQueue) -> None:
    job_id = enqueue_id(backend, "t")
    handle = claim_one(backend, "t")
    queue.pause("t")
    assert handle.complete("done").status == "completed"
    assert get(backend, job_id).status == "completed"


def test_workers_of_a_paused_type_run_nothing_and_run_its_jobs_once_resumed(
    backend: Backend, queue: JobQueue
) -> None:
    queue.register("t", noop)
    queue.pause("t")
    job_id = enqueue_id(backend, "t")
    assert queue.run_pending("t") == 0
    queue.resume("t")
    assert queue.run_pending("t") == 1
    assert get(backend, job_id).result == "ran"


def test_claim_or_enqueue_of_a_paused_type_stores_the_job_pending_without_a_claim(
    backend: Backend, queue: JobQueue
) -> None:
    queue.register("t", noop)
    queue.pause("t")
    assert queue.claim_or_enqueue("t", {"n": 1}) is None
    keyed = queue.claim_or_enqueue("t", {"n": 2}, dedupe_key="k", dedupe_scope="pending")
    assert keyed is None
    (first, second) = sorted(backend.list_jobs(type="t"), key=lambda j: j.data["n"])
    assert (first.status, second.status) == ("pending", "pending")
    assert first.attempts == second.attempts == 0
    queue.resume("t")
    assert queue.run_pending("t") == 2


def test_the_next_job_of_a_key_is_not_claimed_while_its_type_is_paused(
    backend: Backend, queue: JobQueue
) -> None:
    enqueue_id(backend, "t", dedupe_key="k")
    queue.pause("t")
    assert backend.claim_next_by_key("t", "k") is None
    queue.resume("t")
    handle = backend.claim_next_by_key("t", "k")
    assert handle is not None and handle.dedupe_key == "k"


def test_run_now_makes_a_paused_job_due_and_it_runs_first_when_resumed(
    backend: Backend, queue: JobQueue
) -> None:
    later = enqueue_id(backend, "t", delay=3600)
    queue.pause("t")
    assert queue.run_now(later) is True
    assert backend.claim("t") == []
    queue.resume("t")
    assert claim_one(backend, "t").id == later


@pytest.mark.parametrize("bad", ["", " ", "a\x00b", 7, None])
def test_a_bad_type_is_refused_at_the_call_and_nothing_is_stored(
    backend: Backend, queue: JobQueue, bad: Any
) -> None:
    with pytest.raises((TypeError, ValueError)):
        queue.pause(bad)
    with pytest.raises((TypeError, ValueError)):
        queue.resume(bad)
    assert queue.paused_types() == []


def test_stats_say_which_types_are_paused_and_their_lag_is_no_alarm(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    enqueue_id(backend, "held")
    enqueue_id(backend, "flowing")
    queue.pause("held")
    queue.pause("empty")
    clock.advance(120)
    assert queue.get_stats("held").paused is True
    assert queue.get_stats("held").pending == 1
    assert queue.get_stats("flowing").paused is False
    assert queue.get_stats().paused is False  # every type together is never paused
    rows = queue.stats_by_type()
    assert {t: s.paused for t, s in rows.items()} == {
        "empty": True,
        "flowing": False,
        "held": True,
    }
    assert rows["empty"].pending == 0
    alarms = queue.lag_alarms()
    assert list(alarms) == ["flowing"]
    assert alarms["flowing"].oldest_pending_lag >= 119


def test_a_pause_in_another_process_stops_this_ones_claims(
    backend: Backend, clock: FakeClock
) -> None:
    other = JobQueue(second_view(backend, clock), clock=clock)
    job_id = enqueue_id(backend, "t")
    assert backend.claim("t", limit=0) == []  # this process has looked at the pauses
    other.pause("t")
    # A SQL store (and memory) sees it at once; a MongoDB process within its refresh.
    clock.advance(PAUSED_TYPES_REFRESH + 0.5)
    assert backend.claim("t") == []
    other.resume("t")
    clock.advance(PAUSED_RECHECK + 0.5)
    assert claim_one(backend, "t").id == job_id
