"""queue.cancel() on a running job, end to end on every store with real threads and the
real clock: the run's ctx.signal aborts within one heartbeat interval with reason
"cancelled", and the job ends cancelled (or completed, when its handler returned first)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.testing import wait_until
from tests.conftest import BACKENDS, cleanup_backend, make_backend

HEARTBEAT = 0.2


@pytest.fixture(params=BACKENDS)
def live(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Every store on the real clock (heartbeats run on real time)."""
    store = make_backend(request.param)
    store.startup()
    yield store
    cleanup_backend(store)


def test_cancelling_a_running_job_aborts_its_signal_within_one_heartbeat(live: Any) -> None:
    events: list[JobEvent] = []
    queue = JobQueue(live, visibility_timeout=30, on_job_event=events.append)
    started = threading.Event()
    seen: dict[str, Any] = {}

    def handler(job: Job[Any], ctx: JobContext) -> None:
        started.set()
        aborted = ctx.signal.wait(10)
        seen.update(aborted=aborted, reason=ctx.signal.reason, at=time.monotonic())
        ctx.signal.raise_if_aborted()

    try:
        job_id = queue.enqueue("t", {}, max_attempts=3)
        assert job_id is not None
        queue.process("t", handler, poll_interval=0.05, heartbeat_interval=HEARTBEAT)
        assert started.wait(10)
        asked = time.monotonic()
        assert queue.cancel(job_id, "user asked") is True
        assert queue.cancel(job_id) is False  # already requested
        assert wait_until(lambda: queue.get_job(job_id).status == "cancelled", timeout=10)
    finally:
        queue.shutdown(timeout=5)
    assert seen["aborted"] is True and seen["reason"] == "cancelled"
    # Delivered by the next beat: within one interval (a first beat may take two).
    assert seen["at"] - asked < 2 * HEARTBEAT + 0.5
    job = queue.get_job(job_id)
    assert job is not None
    assert (job.status, job.fail_reason, job.attempts) == ("cancelled", "user asked", 1)
    assert [a.outcome for a in job.attempt_history] == ["cancelled"]
    assert "cancelled" in [e.kind for e in events]
    assert queue.get_stats("t").cancelled == 1
    assert queue.cancel(job_id) is False


def test_a_handler_that_returns_after_the_request_completes(live: Any) -> None:
    queue = JobQueue(live, visibility_timeout=30)
    started, release = threading.Event(), threading.Event()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        started.set()
        release.wait(10)  # ignores its signal and finishes its work

    try:
        job_id = queue.enqueue("t", {})
        assert job_id is not None
        queue.process("t", handler, poll_interval=0.05, heartbeat_interval=HEARTBEAT)
        assert started.wait(10)
        assert queue.cancel(job_id) is True
        release.set()
        assert wait_until(lambda: queue.get_job(job_id).status == "completed", timeout=10)
    finally:
        queue.shutdown(timeout=5)


def test_cancel_pending_never_runs_it(live: Any) -> None:
    queue = JobQueue(live, visibility_timeout=30)
    job_id = queue.enqueue("t", {}, delay=60)
    assert job_id is not None
    assert queue.cancel(job_id) is True
    job = queue.get_job(job_id)
    assert job is not None and job.status == "cancelled"
    assert [j.id for j in queue.list_jobs(status="cancelled")] == [job_id]
    assert queue.cancel(job_id) is False
    assert queue.cancel("missing") is False
