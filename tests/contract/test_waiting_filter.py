"""The ``waiting`` filter of ``list_jobs`` and ``count_jobs`` on every store: the jobs
suspended in a sleep, a signal wait or a gather are listed and counted, exactly; a plain
delayed job, a due one, and a retried orchestration waiting out its backoff (a journal
and a later due time, but no wait of its body's) are not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from durabl import Child, Job, JobQueue, Orchestrator
from durabl.orchestrator import OrchestrationContext
from durabl.stores import waiting
from durabl.stores.base import Backend
from durabl.testing import FakeClock

VT = 30.0


@pytest.fixture
def q(backend: Backend, clock: FakeClock) -> Iterator[JobQueue]:
    queue = JobQueue(backend, visibility_timeout=VT, clock=clock)
    yield queue
    queue.shutdown(timeout=30)


def sleeper(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.sleep("nap", 60)


def approver(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.wait_for_signal("approval", "approve")


def gatherer(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.gather("fan-in", octx.start_children("fan-out", [Child("child", {})]))


def flaky(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.step("charge", lambda keys, signal: 1)  # a journal entry, then a retryable failure
    raise RuntimeError("the gateway is down")


@pytest.fixture
def jobs(q: JobQueue, clock: FakeClock) -> dict[str, str]:
    """Every kind of pending job, run once where it runs: their ids by name."""
    orch = Orchestrator(q)
    for type, body in (
        ("sleeper", sleeper),
        ("approver", approver),
        ("gatherer", gatherer),
        ("flaky", flaky),
    ):
        orch.define(type, body, start=False)
        q.register(type, orch.definitions[type].handler)
    backoff = {"max_attempts": 3, "backoff": "fixed", "backoff_delay": 600}
    ids = {"backoff": q.enqueue("flaky", {}, **backoff) or ""}
    for name, type in (("sleeping", "sleeper"), ("signal", "approver"), ("gather", "gatherer")):
        clock.advance(1)  # created one after another: a sort by creation time has no ties
        ids[name] = q.enqueue(type, {}) or ""
    assert q.run_pending() == 4
    ids["delayed"] = q.enqueue("plain", {}, delay=600) or ""
    ids["due"] = q.enqueue("plain", {}) or ""
    backoff = q.get_job(ids["backoff"])
    assert backoff is not None and backoff.status == "pending" and backoff.journal
    assert backoff.attempts == 1 and backoff.waiting_for is None
    return ids


WAITING = ["gather", "signal", "sleeping"]  # newest first


def names(jobs: dict[str, str], listed: list[Job[Any]]) -> list[str]:
    by_id = {job_id: name for name, job_id in jobs.items()}
    return [by_id.get(job.id, "other") for job in listed]


def test_only_suspended_jobs_are_listed_and_counted_as_waiting(
    q: JobQueue, jobs: dict[str, str]
) -> None:
    listed = q.list_jobs(waiting=True)
    assert names(jobs, listed) == WAITING
    assert [j.waiting_for for j in listed] == [
        "children:fan-in",
        "signal:approve",
        listed[2].waiting_for,
    ]
    assert (listed[2].waiting_for or "").startswith("until ")
    assert q.count_jobs(waiting=True) == 3
    assert q.count_jobs(waiting=True, status="pending") == 3
    assert q.count_jobs(waiting=True, at_most=2) == 2
    assert q.list_jobs(waiting=True, type="approver") == listed[1:2]
    assert q.list_jobs(waiting=True, status="completed") == []
    assert q.count_jobs(waiting=True, status="active") == 0


def test_waiting_false_lists_and_counts_every_other_job(q: JobQueue, jobs: dict[str, str]) -> None:
    others = names(jobs, q.list_jobs(waiting=False))
    assert sorted(others) == ["backoff", "delayed", "due", "other"]  # "other": the child
    assert q.count_jobs(waiting=False) == 4 == q.count_jobs() - 3
    assert q.count_jobs(waiting=False, at_most=2) == 2
    assert q.count_jobs(waiting=False, status="pending") == 4


def test_waiting_lists_page_and_sort_across_reads(
    q: JobQueue, jobs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two candidates in the first read, then four: the backoff candidate left out falls
    inside the second read, and the pages still hold exactly the waiting jobs."""
    monkeypatch.setattr(waiting, "CANDIDATES_PER_READ", 2)
    assert names(jobs, q.list_jobs(waiting=True, limit=0)) == WAITING
    assert names(jobs, q.list_jobs(waiting=True, limit=0, order="-created_at")) == WAITING
    assert names(jobs, q.list_jobs(waiting=True, limit=2, offset=1)) == WAITING[1:]
    assert names(jobs, q.list_jobs(waiting=True, limit=1, offset=3)) == []
    assert names(jobs, q.list_jobs(waiting=True, order="created_at")) == WAITING[::-1]
    assert names(jobs, q.list_jobs(waiting=True, among_newest=2)) == WAITING[:2]
    assert q.count_jobs(waiting=True) == 3


def test_a_sleep_that_is_over_is_due_not_waiting(
    q: JobQueue, jobs: dict[str, str], clock: FakeClock
) -> None:
    clock.advance(61)  # past the sleep's end, before the gather's recheck
    assert names(jobs, q.list_jobs(waiting=True)) == WAITING[:2]
    assert q.count_jobs(waiting=True) == 2


@pytest.mark.parametrize("bad", ["yes", 1, 0, [True]])
def test_a_waiting_filter_that_is_no_bool_is_a_type_error(q: JobQueue, bad: Any) -> None:
    with pytest.raises(TypeError, match="waiting"):
        q.list_jobs(waiting=bad)
    with pytest.raises(TypeError, match="waiting"):
        q.count_jobs(waiting=bad)


def test_bulk_operations_refuse_the_waiting_filter_and_change_nothing(
    q: JobQueue, jobs: dict[str, str]
) -> None:
    for operation in (q.cancel_matching, q.delete_matching, q.run_now_matching):
        with pytest.raises(TypeError, match="waiting"):
            operation(waiting=True)
    with pytest.raises(TypeError, match="waiting"):
        q.retry_matching(waiting=False)
    assert q.count_jobs(waiting=True) == 3
    assert q.count_jobs(status="pending") == 7
