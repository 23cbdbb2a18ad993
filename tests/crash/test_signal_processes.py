"""Signals across real processes over one store (a SQLite file; PostgreSQL tables of the
test's own; a MongoDB database of its own): the job waits in a worker process holding no
thread, the signal comes from this process, and the worker that runs it on is another
process, or a later one after the first was killed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from durabl import JobQueue
from tests.crash.signal_proc import TYPE
from tests.crash.test_crash_recovery import ROOT, queue, url, wait_until

__all__ = ["queue", "url"]  # the store fixtures, shared with the crash tests

pytestmark = pytest.mark.slow

#: The worker's poll interval where the store pushes: far longer than the test waits, so
#: only the signal's push can explain a pickup. SQLite pushes only inside one process, so
#: a signal from another process is found by the next poll.
PUSHED_POLL, SQLITE_POLL = 60.0, 0.5


class SignalWorker:
    """One ``tests.crash.signal_proc`` process and its log."""

    def __init__(self, url: str, log: Path) -> None:
        self.log = log
        poll = SQLITE_POLL if url.startswith("sqlite") else PUSHED_POLL
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.crash.signal_proc",
                "--url",
                url,
                "--log",
                str(log),
                "--poll-interval",
                str(poll),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until(lambda: "ready" in self.lines() or self.popen.poll() is not None, 60)
        assert self.popen.poll() is None, self.popen.stderr and self.popen.stderr.read()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        self.popen.wait(30)
        if self.popen.stderr:
            self.popen.stderr.close()


@pytest.fixture
def workers() -> Iterator[list[SignalWorker]]:
    started: list[SignalWorker] = []
    yield started
    for worker in started:
        worker.stop()


def start(workers: list[SignalWorker], url: str, log: Path) -> SignalWorker:
    worker = SignalWorker(url, log)
    workers.append(worker)
    return worker


def waits_for_approval(queue: JobQueue, job_id: str) -> bool:
    job = queue.get_job(job_id)
    return job is not None and job.waiting_for == "signal:approve"


def test_a_signal_from_this_process_wakes_the_job_waiting_in_another(
    url: str, queue: JobQueue, tmp_path: Path, workers: list[SignalWorker]
) -> None:
    worker = start(workers, url, tmp_path / "worker.log")
    job_id = queue.enqueue(TYPE, {}) or ""
    wait_until(lambda: waits_for_approval(queue, job_id), 30)
    assert queue.signal(job_id, "approve", {"by": "web"})
    wait_until(lambda: f"got {job_id} " + json.dumps({"by": "web"}) in worker.lines(), 20)
    wait_until(lambda: getattr(queue.get_job(job_id), "status", None) == "completed", 20)
    assert queue.get_job(job_id).result == {"by": "web"}  # type: ignore[union-attr]


def test_a_signal_sent_while_no_worker_runs_reaches_the_next_one(
    url: str, queue: JobQueue, tmp_path: Path, workers: list[SignalWorker]
) -> None:
    """The waiting job holds no claim: killing its worker loses nothing, and the signal
    sent meanwhile is kept for the worker started later, which gets it once."""
    first = start(workers, url, tmp_path / "first.log")
    job_id = queue.enqueue(TYPE, {}) or ""
    wait_until(lambda: waits_for_approval(queue, job_id), 30)
    first.stop(signal.SIGKILL)
    assert queue.signal(job_id, "approve", "yes")
    assert queue.get_job(job_id).status == "pending"  # type: ignore[union-attr]
    second = start(workers, url, tmp_path / "second.log")
    wait_until(lambda: getattr(queue.get_job(job_id), "status", None) == "completed", 30)
    assert queue.get_job(job_id).result == "yes"  # type: ignore[union-attr]
    assert [line for line in second.lines() if line.startswith("got ")] == [f'got {job_id} "yes"']
    assert not [line for line in first.lines() if line.startswith("got ")]


def test_a_signal_sent_before_the_wait_is_delivered_when_a_worker_gets_there(
    url: str, queue: JobQueue, tmp_path: Path, workers: list[SignalWorker]
) -> None:
    job_id = queue.enqueue(TYPE, {}) or ""
    assert queue.signal(job_id, "approve", 1)
    assert queue.signal(job_id, "approve", 2)  # kept for a later wait; this body has one
    worker = start(workers, url, tmp_path / "worker.log")
    wait_until(lambda: getattr(queue.get_job(job_id), "status", None) == "completed", 30)
    assert queue.get_job(job_id).result == 1  # type: ignore[union-attr]
    assert [line for line in worker.lines() if line.startswith("run ")] == [f"run {job_id}"]
