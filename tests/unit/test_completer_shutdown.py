"""What a shutdown reports of the completer: outcomes left unwritten are the runs handed
over and not yet written, never the completer's own markers (its end-of-stream marker, the
starts it records), so a shutdown that times out on a slow handler warns of nothing unwritten
when every outcome handed over was written."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue, MemoryBackend, SqliteJobQueue
from durabl.model.job import JobResult
from durabl.model.options import build_new_job
from durabl.runtime.completer import Completer
from durabl.stores.base import Completion
from durabl.testing import FakeClock


@pytest.fixture(params=["memory", "sqlite"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> JobQueue:
    if request.param == "memory":
        return JobQueue(MemoryBackend(), visibility_timeout=30)
    return JobQueue(SqliteJobQueue(tmp_path / "q.db"), visibility_timeout=30)


def unwritten_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unwritten" in r.getMessage()]


def test_a_shutdown_timed_out_by_a_slow_handler_reports_no_written_outcome_as_unwritten(
    queue: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    slow_started, release = threading.Event(), threading.Event()

    def handler(job: Job[Any], ctx: JobContext) -> object:
        if job.data.get("slow"):
            slow_started.set()
            release.wait(30)  # ignores ctx.signal, as a handler in a blocking call would
        return {"n": job.data["n"]}

    fast = [queue.enqueue("t", {"n": n}) or "" for n in range(3)]
    slow = queue.enqueue("t", {"n": 9, "slow": True}) or ""
    queue.process("t", handler, concurrency=2, poll_interval=0.05)
    try:
        assert slow_started.wait(10)
        done = [queue.wait(job_id, timeout=10) for job_id in fast]
        with caplog.at_level(logging.WARNING, logger="durabl"):
            queue.shutdown(timeout=0.2)  # times out on the slow handler
    finally:
        release.set()
        queue.shutdown(timeout=2)
    assert [(job.status, job.result) for job in done] == [("completed", {"n": n}) for n in range(3)]
    left = queue.get_job(slow)
    assert left is not None and left.status == "pending"  # handed back by the shutdown
    assert unwritten_warnings(caplog) == []


class Owner:
    """A handed-over run, reduced to what the completer calls back."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.reported = threading.Event()

    def completion_written(self, result: JobResult | Exception, duration: float) -> None:
        self.reported.set()

    def write_outcome(self) -> None:
        raise AssertionError("a completion is written by the completer, not by its run")


def test_waiting_counts_the_outcomes_not_written_including_the_batch_in_flight(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = MemoryBackend(clock=clock)
    for n in range(2):
        backend.enqueue(build_new_job("t", {"n": n}, now=clock.now()))
    first, second = backend.claim("t", limit=2)
    real = backend.complete_many
    entered, release = threading.Event(), threading.Event()

    def held(batch: Sequence[Completion]) -> list[JobResult]:
        entered.set()
        assert release.wait(10), "the test never released the write"
        return real(batch)

    monkeypatch.setattr(backend, "complete_many", held)
    completer: Completer[Owner] = Completer(backend, "durabl-completer-t")
    owners = [Owner(first.id), Owner(second.id)]
    try:
        completer.submit(owners[0], Completion(first.id, first.claim_token), 0.0)
        assert entered.wait(5)  # the first batch is being written
        completer.submit(owners[1], Completion(second.id, second.claim_token), 0.0)
        completer.mark_started(second.id, second.claim_token)  # a start: no outcome
        assert not completer.close(0)  # puts the end marker: no outcome either
        assert completer.waiting() == 2
    finally:
        release.set()
    assert all(owner.reported.wait(5) for owner in owners)
    assert completer.close(5)
    assert completer.waiting() == 0
