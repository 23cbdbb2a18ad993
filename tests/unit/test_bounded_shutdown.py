"""A drain ends within its timeout plus one fixed grace, however many handlers ignore
``ctx.signal``: the platform's kill deadline is what a drain must fit in."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue, MemoryBackend, SqliteJobQueue
from durabl.runtime.shutdown import DRAIN_GRACE

TIMEOUT = 2.0
SLACK = 0.5  # thread scheduling on a busy two-core machine


@pytest.fixture(params=["memory", "sqlite"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> JobQueue:
    if request.param == "memory":
        return JobQueue(MemoryBackend(), visibility_timeout=30)
    return JobQueue(SqliteJobQueue(tmp_path / "q.db"), visibility_timeout=30)


@pytest.mark.parametrize(("types", "per_type"), [(1, 8), (2, 8)])
def test_shutdown_of_stuck_handlers_ends_within_its_timeout_plus_the_grace(
    queue: JobQueue, types: int, per_type: int
) -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def stuck(job: Job[Any], ctx: JobContext) -> None:
        started.release()
        release.wait(60)  # ignores ctx.signal, as a handler in a blocking call would

    try:
        for t in range(types):
            for n in range(per_type):
                queue.enqueue(f"t{t}", {"n": n})
            queue.process(f"t{t}", stuck, concurrency=per_type, poll_interval=0.05)
        for _ in range(types * per_type):
            assert started.acquire(timeout=10)
        began = time.monotonic()
        queue.shutdown(timeout=TIMEOUT)
        took = time.monotonic() - began
    finally:
        release.set()
    assert TIMEOUT <= took <= TIMEOUT + DRAIN_GRACE + SLACK, took
    stats = queue.backend.get_stats()
    assert (stats.pending, stats.active) == (types * per_type, 0)  # every claim handed back
