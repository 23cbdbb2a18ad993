"""Results: a handler's non-None return value is kept as Job.result by the completion
write; a value no store can keep fails the job fatal naming its type; queue.wait() blocks
until the job is terminal."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue
from durabl.stores.base import Backend, Completion
from durabl.testing import FakeClock
from tests.contract.support import enqueue_id, get

RESULT = {"total": 3, "items": ["a", "b"], "at": datetime(2026, 1, 2, tzinfo=timezone.utc)}


def test_complete_keeps_the_result(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    (handle,) = backend.claim("t")
    assert handle.complete(RESULT) == "completed"
    assert get(backend, job_id).result == RESULT


def test_complete_many_keeps_each_result(backend: Backend) -> None:
    ids = [enqueue_id(backend) for _ in range(3)]
    handles = backend.claim("t", limit=3)
    completions = [Completion(h.id, h.claim_token, (), n or None) for n, h in enumerate(handles)]
    assert backend.complete_many(completions) == ["completed"] * 3
    by_id = {h.id: n or None for n, h in enumerate(handles)}
    assert {job_id: get(backend, job_id).result for job_id in ids} == by_id


def test_a_job_without_a_result_has_none(backend: Backend) -> None:
    job_id = enqueue_id(backend)
    (handle,) = backend.claim("t")
    handle.complete()
    assert get(backend, job_id).result is None


def test_a_result_no_store_can_keep_is_refused_before_anything_is_written(
    backend: Backend,
) -> None:
    job_id = enqueue_id(backend)
    (handle,) = backend.claim("t")
    with pytest.raises(TypeError, match="object"):
        handle.complete(object())
    assert get(backend, job_id).status == "active"


def test_a_handler_returning_an_unkeepable_value_fails_fatal_naming_its_type(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    job_id = queue.enqueue("t", {}, max_attempts=3)
    assert job_id is not None

    class Report:
        pass

    queue.process("t", lambda job, ctx: Report(), concurrency=1, poll_interval=0.05)
    try:
        job = queue.wait(job_id, timeout=10)
    finally:
        queue.shutdown(timeout=2)
    assert (job.status, job.failure_kind, job.result) == ("failed", "fatal", None)
    assert "Report" in (job.fail_reason or "")


def test_a_handler_return_value_becomes_the_result_and_wait_returns_it(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    go = threading.Event()

    def handler(job: Job[Any], ctx: JobContext) -> object:
        go.wait(10)
        return {"doubled": job.data["n"] * 2}

    job_id = queue.enqueue("t", {"n": 21})
    assert job_id is not None
    queue.process("t", handler, concurrency=1, poll_interval=0.05)
    try:
        with pytest.raises(TimeoutError):
            queue.wait(job_id, timeout=0.05)
        go.set()
        job = queue.wait(job_id, timeout=10)
    finally:
        queue.shutdown(timeout=2)
    assert (job.status, job.result) == ("completed", {"doubled": 42})


def test_wait_returns_a_terminal_job_at_once_and_refuses_bad_input(backend: Backend) -> None:
    queue = JobQueue(backend, visibility_timeout=30)
    job_id = enqueue_id(backend)
    assert backend.cancel(job_id) == "cancelled"
    assert queue.wait(job_id).status == "cancelled"
    with pytest.raises(ValueError, match="no job"):
        queue.wait("0123456789abcdef01234567", timeout=1)
    with pytest.raises(ValueError, match="timeout"):
        queue.wait(job_id, timeout=-1)
