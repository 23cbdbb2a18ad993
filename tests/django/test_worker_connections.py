"""Worker threads treat each job like a request: stale database connections are dropped
before and after every run, by a run hook the worker runner installs on its queue."""

from __future__ import annotations

import io
import os
import signal
import threading
from typing import Any

import pytest

from durabl import JobQueue, MemoryBackend
from durabl.orchestrator import OrchestrationHandler
from durabl_django import workers
from durabl_django.registry import JobSpec


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(workers, "close_old_connections", lambda: seen.append("close"))
    return seen


def test_each_job_is_bracketed_by_close_old_connections(calls: list[str]) -> None:
    queue = JobQueue(MemoryBackend())
    queue.add_run_hook(workers.fresh_connections)
    queue.register("t", lambda job, ctx: calls.append("run"))
    queue.enqueue("t", {})
    assert queue.run_pending() == 1
    assert calls == ["close", "run", "close"]


def test_connections_are_dropped_even_when_the_job_fails(calls: list[str]) -> None:
    queue = JobQueue(MemoryBackend())
    queue.add_run_hook(workers.fresh_connections)

    def handler(job: Any, ctx: Any) -> None:
        raise RuntimeError("boom")

    queue.register("t", handler)
    job_id = queue.enqueue("t", {}, max_attempts=1)
    assert queue.run_pending() == 1
    assert calls == ["close", "close"]
    job = queue.get_job(job_id or "")
    assert job is not None and job.status == "failed"


def test_an_orchestration_is_bracketed_and_keeps_its_options(calls: list[str]) -> None:
    def body(job: Any, octx: Any) -> None:
        octx.step("one", lambda keys, signal: calls.append("step"))

    handler = OrchestrationHandler(body, step_timeout=5)
    queue = JobQueue(MemoryBackend())
    queue.add_run_hook(workers.fresh_connections)
    queue.register("t", handler)
    queue.enqueue("t", {})
    assert queue.run_pending() == 1
    assert calls == ["close", "step", "close"]
    assert handler.step_timeout == 5  # the handler itself is not rebuilt


def test_the_worker_runner_installs_the_hook_on_its_queue(calls: list[str]) -> None:
    ran = threading.Event()
    queue = JobQueue(MemoryBackend())
    spec = JobSpec("t", lambda job, ctx: ran.set(), poll_interval=0.05)
    runner = workers.Runner(
        queue, [spec], reaper=False, shutdown_timeout=2, stdout=io.StringIO(), stderr=io.StringIO()
    )
    runner.start()
    try:
        queue.enqueue("t", {})
        assert ran.wait(10)
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # the runner's own way out: a drain
        runner.wait()
    assert calls[:1] == ["close"] and len(calls) == 2
