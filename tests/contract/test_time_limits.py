"""Time limits (``timeout=`` on ``@durabl.job``, ``process()`` and ``enqueue()``) on every
store: past its limit a run's signal aborts with ``timed-out`` and its attempt fails with
failure kind ``timed-out`` (retried with backoff while attempts remain). The runs here are
inline (``run_pending``) on the fake clock; a worker pool abandoning a handler that ignores
its signal is tests/contract/test_time_limits_pool.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import durabl
from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.runtime.declared import registry
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import get


def overrunning(clock: FakeClock, seconds: float, *, honours: bool = True) -> Any:
    """A handler that takes ``seconds`` (on the fake clock), then looks at its signal."""

    def handler(job: Job[Any], ctx: JobContext) -> str:
        clock.advance(seconds)
        if honours:
            ctx.signal.raise_if_aborted()
        return "finished anyway"

    return handler


@pytest.fixture
def events(queue: JobQueue) -> list[JobEvent]:
    seen: list[JobEvent] = []
    queue.add_event_sink(seen.append, kinds={"timed-out", "failed", "dead-lettered"})
    return seen


def test_a_run_past_its_limit_fails_timed_out_and_is_retried_with_backoff(
    backend: Backend, queue: JobQueue, clock: FakeClock, events: list[JobEvent]
) -> None:
    queue.register("t", overrunning(clock, 11), timeout=10)
    job_id = queue.enqueue("t", {}, max_attempts=2, backoff="fixed", backoff_delay=30)
    assert job_id is not None
    assert queue.run_pending("t", limit=1) == 1
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.failure_kind) == ("pending", 1, None)
    assert job.fail_reason is not None
    assert job.fail_reason.startswith("timed-out: the run took longer than its time limit of 10 s")
    assert "JobAborted" in job.fail_reason
    assert job.run_at == backend.now() + timedelta(seconds=30)
    assert [(a.outcome, (a.error or "")[:9]) for a in job.attempt_history] == [
        ("retry-scheduled", "timed-out")
    ]
    timed_out = [e for e in events if e.kind == "timed-out"]
    assert [(e.job_id, e.terminal, e.attempt) for e in timed_out] == [(job_id, False, 1)]
    assert timed_out[0].extra == {"timeout": 10.0, "abandoned": False}

    clock.advance(30)
    assert queue.run_pending("t", limit=1) == 1  # the last attempt
    job = get(backend, job_id)
    assert (job.status, job.attempts, job.failure_kind) == ("failed", 2, "timed-out")
    assert [e.terminal for e in events if e.kind == "timed-out"] == [False, True]
    assert [e.extra["failure_kind"] for e in events if e.kind == "dead-lettered"] == ["timed-out"]
    assert queue.get_stats("t").failed_by_kind == {"timed-out": 1}
    assert [j.id for j in queue.list_failed(failure_kind="timed-out")] == [job_id]


def test_a_handler_that_returns_after_its_limit_still_fails_timed_out(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    queue.register("t", overrunning(clock, 6, honours=False), timeout=5)
    job_id = queue.enqueue("t", {}, max_attempts=1)
    assert job_id is not None
    assert queue.run_pending("t") == 1
    job = get(backend, job_id)
    assert (job.status, job.failure_kind, job.result) == ("failed", "timed-out", None)


def test_a_run_within_its_limit_completes(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    queue.register("t", overrunning(clock, 9), timeout=10)
    job_id = queue.enqueue("t", {})
    assert job_id is not None
    assert queue.run_pending("t") == 1
    assert get(backend, job_id).status == "completed"


def test_the_jobs_own_timeout_wins_over_its_types(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    queue.register("t", overrunning(clock, 6), timeout=100)
    short = queue.enqueue("t", {}, max_attempts=1, timeout=5)
    long = queue.enqueue("t", {}, max_attempts=1, timeout=timedelta(minutes=1))
    plain = queue.enqueue("t", {}, max_attempts=1)
    assert short is not None and long is not None and plain is not None
    assert (get(backend, short).timeout, get(backend, long).timeout) == (5.0, 60.0)
    assert get(backend, plain).timeout is None  # the type's applies when it runs
    assert queue.run_pending("t") == 3
    statuses = [(get(backend, i).status, get(backend, i).failure_kind) for i in (short, long)]
    assert statuses == [("failed", "timed-out"), ("completed", None)]
    assert get(backend, plain).status == "completed"


def test_a_job_without_any_limit_runs_as_long_as_it_takes(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    queue.register("t", overrunning(clock, 20))  # (within the lease: no heartbeat here)
    job_id = queue.enqueue("t", {})
    assert job_id is not None
    assert queue.run_pending("t") == 1
    assert get(backend, job_id).status == "completed"


@pytest.fixture
def declared() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        registry.remove(name)


def test_a_declared_timeout_applies_and_process_replaces_it(
    backend: Backend, queue: JobQueue, clock: FakeClock, declared: list[str]
) -> None:
    declared.extend(["decl-limit", "decl-limit-2"])
    durabl.job("decl-limit", timeout=5)(overrunning(clock, 6))
    queue.register("decl-limit", durabl.get_declaration("decl-limit").handler)
    job_id = queue.enqueue("decl-limit", {}, max_attempts=1)
    assert job_id is not None
    assert get(backend, job_id).timeout is None  # not stored: the worker's type decides
    assert queue.run_pending("decl-limit") == 1
    assert get(backend, job_id).failure_kind == "timed-out"

    durabl.job("decl-limit-2", timeout=5)(overrunning(clock, 6))
    queue.register("decl-limit-2", overrunning(clock, 6), timeout=60)
    other = queue.enqueue("decl-limit-2", {}, max_attempts=1)
    assert other is not None
    assert queue.run_pending("decl-limit-2") == 1
    assert get(backend, other).status == "completed"


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "10", True])
def test_a_bad_timeout_is_refused_where_it_is_given(queue: JobQueue, bad: Any) -> None:
    with pytest.raises(ValueError, match="timeout"):
        queue.enqueue("t", {}, timeout=bad)
    with pytest.raises(ValueError, match="timeout"):
        queue.register("t", lambda job, ctx: None, timeout=bad)
    with pytest.raises(ValueError, match="timeout"):
        durabl.job("never-declared", timeout=bad)
    assert queue.list_jobs() == []
