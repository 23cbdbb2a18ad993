"""The poller's read-ahead: a backlog of short jobs is claimed in batches, never one claim
per finished run, and a claim never waits long unrenewed for a free worker."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, MemoryBackend, SqliteJobQueue
from durabl.runtime.worker import MIN_READ_AHEAD, READ_AHEAD_LEASE_SHARE, READ_AHEAD_SECONDS
from durabl.stores.base import Backend


class CountingClaims:
    """Delegates to a backend, recording the size of each claim that found jobs."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.sizes: list[int] = []

    def claim(self, type: str, **kwargs: Any) -> Any:
        handles = self._backend.claim(type, **kwargs)
        if handles:
            self.sizes.append(len(handles))
        return handles

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_backlog_of_short_jobs_is_claimed_in_batches(tmp_path: Path, concurrency: int) -> None:
    store = SqliteJobQueue(tmp_path / "q.db")
    backend = CountingClaims(store)
    queue = JobQueue(backend)
    jobs = 600
    for i in range(jobs):
        queue.enqueue("t", {"i": i})
    done = threading.Semaphore(0)
    queue.process("t", lambda job, ctx: done.release(), concurrency=concurrency, poll_interval=1)
    try:
        for _ in range(jobs):
            assert done.acquire(timeout=30)
    finally:
        queue.shutdown(10)
    assert sum(backend.sizes) == jobs
    # The first claim fills the workers; from then on each refill takes what the workers
    # emptied, in one statement: far fewer claims than jobs.
    assert len(backend.sizes) <= jobs // (MIN_READ_AHEAD // 2), backend.sizes
    assert max(backend.sizes) <= concurrency + max(concurrency, MIN_READ_AHEAD)
    assert store.get_stats("t").completed == jobs


def _processor_after_runs(visibility_timeout: float, run_seconds: float, concurrency: int) -> Any:
    queue = JobQueue(MemoryBackend(), visibility_timeout=visibility_timeout)
    queue.register("t", lambda job, ctx: None, concurrency=concurrency)
    processor = queue.processors["t"]
    processor._run_seconds = run_seconds  # what the workers measured so far
    return processor


def test_no_read_ahead_before_runs_are_known_or_when_they_are_long() -> None:
    assert _processor_after_runs(300, 0.0, 4).free_slots() > 4  # short: reads ahead
    unknown = _processor_after_runs(300, 0.0, 4)
    unknown._run_seconds = None
    assert unknown.free_slots() == 4
    assert _processor_after_runs(300, 2.0, 4).free_slots() == 4


def test_read_ahead_holds_only_a_short_stretch_of_work() -> None:
    # 10 ms runs on 2 workers: READ_AHEAD_SECONDS (50 ms) of work is 10 runs.
    processor = _processor_after_runs(300, 0.01, 2)
    ahead = processor.free_slots() - 2
    assert ahead == int(READ_AHEAD_SECONDS * 2 / 0.01) == 10
    # 1 ms runs: capped at MIN_READ_AHEAD claims.
    assert _processor_after_runs(300, 0.001, 2).free_slots() - 2 == MIN_READ_AHEAD
    # 0.2 s runs: nothing beyond the free workers.
    assert _processor_after_runs(300, 0.2, 2).free_slots() == 2


def test_read_ahead_keeps_the_wait_for_a_worker_a_small_part_of_a_short_lease() -> None:
    # A 0.2 s lease allows 0.02 s of waiting: 4 runs of 10 ms across 2 workers.
    processor = _processor_after_runs(0.2, 0.01, 2)
    ahead = processor.free_slots() - 2
    assert ahead == int(0.2 * READ_AHEAD_LEASE_SHARE * 2 / 0.01) == 4


def test_runs_that_take_no_time_at_all_do_not_break_the_sizing() -> None:
    processor = _processor_after_runs(300, 1e-300, 1)
    assert processor.free_slots() == 1 + MIN_READ_AHEAD
