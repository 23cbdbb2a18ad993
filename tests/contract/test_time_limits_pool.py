"""Time limits in a worker pool, end to end on every store with real threads and the real
clock: a handler that honours its signal is woken at its limit; one that ignores it (stuck
in a blocking call) is abandoned one heartbeat interval later, its attempt recorded
``timed-out``, while a new thread keeps the type running; its late outcome is fenced."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.testing import wait_until
from tests.conftest import BACKENDS, cleanup_backend, make_backend

HEARTBEAT = 0.1
LIMIT = 0.3


@pytest.fixture(params=BACKENDS)
def live(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Every store on the real clock (heartbeats and time limits run on real time)."""
    store = make_backend(request.param)
    store.startup()
    yield store
    cleanup_backend(store)


def test_a_handler_waiting_on_its_signal_is_woken_at_its_limit_and_retried(live: Any) -> None:
    queue = JobQueue(live, visibility_timeout=30)
    woken: list[tuple[str | None, float]] = []
    started = time.monotonic()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        ctx.signal.wait(30)
        woken.append((ctx.signal.reason, time.monotonic() - started))
        ctx.signal.raise_if_aborted()

    try:
        job_id = queue.enqueue("t", {}, max_attempts=2, backoff="fixed", backoff_delay=60)
        assert job_id is not None
        queue.process("t", handler, poll_interval=0.05, heartbeat_interval=HEARTBEAT, timeout=LIMIT)
        assert wait_until(lambda: queue.get_job(job_id).attempt_history, timeout=10)
    finally:
        queue.shutdown(timeout=5)
    job = queue.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == ("pending", 1)
    assert [a.outcome for a in job.attempt_history] == ["retry-scheduled"]
    assert woken[0][0] == "timed-out" and woken[0][1] < 5  # not the 30 s it waited for


def test_a_stuck_handler_is_abandoned_while_a_new_thread_keeps_the_type_running(
    live: Any, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[JobEvent] = []
    queue = JobQueue(live, visibility_timeout=30, on_job_event=events.append)
    never = threading.Event()  # what the stuck handler waits for, set only at the end
    stuck: list[threading.Thread] = []
    ran: list[int] = []

    def handler(job: Job[Any], ctx: JobContext) -> str:
        if job.data.get("stuck"):
            stuck.append(threading.current_thread())
            never.wait(30)  # a blocking call that ignores ctx.signal
            ctx.log("too late")
            return "too late"
        ran.append(job.data["n"])
        return "done"

    try:
        stuck_id = queue.enqueue("t", {"stuck": True}, max_attempts=1)
        assert stuck_id is not None
        # One thread only: the other jobs can run only on the one that replaces it.
        queue.process(
            "t",
            handler,
            concurrency=1,
            poll_interval=0.05,
            heartbeat_interval=HEARTBEAT,
            timeout=LIMIT,
        )
        assert wait_until(lambda: stuck, timeout=10)
        # Their own generous limit: on a loaded machine a quick handler's run may take
        # longer than the stuck job's 0.3 s, and a rerun would not be what this tests.
        others = [queue.enqueue("t", {"n": n}, timeout=30) for n in range(3)]
        done = lambda: all(queue.get_job(i or "").status == "completed" for i in others)  # noqa: E731
        assert wait_until(done, timeout=15)
        assert sorted(ran) == [0, 1, 2]
        assert stuck[0].is_alive()  # left behind, not killed
        job = queue.get_job(stuck_id)
        assert job is not None
        assert (job.status, job.failure_kind, job.attempts) == ("failed", "timed-out", 1)
        assert job.fail_reason is not None and "its thread was abandoned" in job.fail_reason
        assert [a.outcome for a in job.attempt_history] == ["failed"]
        timed_out = [e for e in events if e.kind == "timed-out"]
        assert [(e.job_id, e.terminal) for e in timed_out] == [(stuck_id, True)]
        assert timed_out[0].extra == {"timeout": LIMIT, "abandoned": True}
        assert any(
            stuck[0].name in r.getMessage() and "handler" in r.getMessage()
            for r in caplog.records
            if r.levelname == "ERROR"
        )
        processor = queue._processors.by_type["t"]  # the pool keeps the threads it left
        assert processor.abandoned_threads == [stuck[0]]

        before = queue.get_job(stuck_id)
        never.set()  # the stuck handler returns now: its completion must change nothing
        stuck[0].join(10)
        assert not stuck[0].is_alive()  # it left the pool
        assert queue.get_job(stuck_id) == before
        assert "completed" not in [e.kind for e in events if e.job_id == stuck_id]
    finally:
        never.set()
        queue.shutdown(timeout=5)
