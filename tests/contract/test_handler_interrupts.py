"""A handler that raises SystemExit, KeyboardInterrupt or another BaseException: each run
counts as a failed attempt, so the job runs at most ``max_attempts`` times."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.stores.base import Backend
from durabl.testing import FakeClock


class Stop(BaseException):
    """Neither an Exception nor one of Python's own."""


INTERRUPTS = [SystemExit(3), KeyboardInterrupt(), Stop("custom")]


@pytest.mark.parametrize("exc", INTERRUPTS, ids=lambda e: type(e).__name__)
def test_a_worker_thread_records_it_as_the_last_attempt_and_serves_the_next_job(
    backend: Backend, clock: FakeClock, exc: BaseException
) -> None:
    finished: list[JobEvent] = []
    done = threading.Semaphore(0)

    def on_event(event: JobEvent) -> None:
        if event.kind in ("failed", "completed"):
            finished.append(event)
            done.release()

    queue = JobQueue(backend, visibility_timeout=30, clock=clock, on_job_event=on_event)
    calls: list[str] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        calls.append(job.id)
        if job.data["raise"]:
            raise exc

    bad = queue.enqueue("t", {"raise": True}, max_attempts=1)
    try:
        queue.process("t", handler, concurrency=1, poll_interval=0.05)
        assert done.acquire(timeout=10)
        good = queue.enqueue("t", {"raise": False})  # the same worker thread takes it
        assert done.acquire(timeout=10)
    finally:
        queue.shutdown(timeout=2)
    assert calls == [bad, good]
    failed = backend.get_job(bad or "")
    assert failed is not None
    assert (failed.status, failed.failure_kind, failed.attempts) == ("failed", "interrupted", 1)
    assert (failed.fail_reason or "").startswith(f"{type(exc).__name__}:")
    assert [e.kind for e in finished] == ["failed", "completed"]


@pytest.mark.parametrize("exc", INTERRUPTS, ids=lambda e: type(e).__name__)
def test_the_calling_thread_sees_it_again_once_each_attempt_is_recorded(
    backend: Backend, clock: FakeClock, exc: BaseException
) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    calls: list[int] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        calls.append(1)
        raise exc

    job_id = queue.enqueue("t", {}, max_attempts=3, backoff="fixed", backoff_delay=1)
    queue.register("t", handler)
    try:
        for attempt in (1, 2, 3):
            with pytest.raises(type(exc)):
                queue.run_pending("t")
            job = backend.get_job(job_id or "")
            assert job is not None and job.attempts == attempt
            clock.advance(2)
        assert queue.run_pending("t") == 0  # nothing left to run
    finally:
        queue.shutdown(timeout=2)
    job = backend.get_job(job_id or "")
    assert job is not None
    assert (job.status, job.failure_kind, len(calls)) == ("failed", "interrupted", 3)


def test_an_inline_run_records_it_and_raises_it(backend: Backend, clock: FakeClock) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)

    def handler(job: Job[Any], ctx: JobContext) -> None:
        raise KeyboardInterrupt

    handle = queue.claim_or_enqueue("t", {}, max_attempts=1)
    assert handle is not None
    try:
        with pytest.raises(KeyboardInterrupt):
            queue.run_claimed(handle, handler)
    finally:
        queue.shutdown(timeout=2)
    job = backend.get_job(handle.id)
    assert job is not None
    assert (job.status, job.failure_kind) == ("failed", "interrupted")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class OnlyRepr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Unprintable(), "Unprintable: <unprintable Unprintable>"),
        (OnlyRepr(), "OnlyRepr: OnlyRepr()"),
    ],
)
def test_an_exception_that_cannot_be_printed_is_still_recorded_as_what_it_was(
    backend: Backend, clock: FakeClock, exc: Exception, expected: str
) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)

    def handler(job: Job[Any], ctx: JobContext) -> None:
        raise exc

    job_id = queue.enqueue("t", {}, max_attempts=1)
    queue.register("t", handler)
    try:
        assert queue.run_pending("t") == 1
    finally:
        queue.shutdown(timeout=2)
    job = backend.get_job(job_id or "")
    assert job is not None
    assert (job.status, job.failure_kind) == ("failed", "retries-exhausted")
    assert (job.fail_reason or "").startswith(expected)
