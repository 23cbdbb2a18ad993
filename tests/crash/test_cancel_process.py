"""queue.cancel() from one process stops a job running in another: a real worker
subprocess over one store (each store of the crash tests: :func:`tests.crash.
test_crash_recovery.url`) sees its ctx.signal abort with reason "cancelled" within one
heartbeat interval, and the job ends cancelled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from durabl import JobQueue, backend_from_url
from durabl.testing import wait_until
from tests.crash.test_crash_recovery import url

__all__ = ["url"]  # the store fixture, shared with the crash tests

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 0.3


@pytest.fixture
def queue(url: str) -> Iterator[JobQueue]:
    q = JobQueue(backend_from_url(url), visibility_timeout=30)
    yield q
    q.backend.close()


def test_cancel_stops_a_job_running_in_another_process(
    url: str, queue: JobQueue, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    job_id = queue.enqueue("slow", {}, max_attempts=3)
    assert job_id is not None
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.crash.cancel_proc", url, str(log), str(INTERVAL)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        started = f"started {job_id}"
        assert wait_until(lambda: log.exists() and started in log.read_text(), timeout=30)
        asked = time.monotonic()
        assert queue.cancel(job_id, "operator") is True
        assert wait_until(lambda: "aborted" in log.read_text(), timeout=10)
        delivered = time.monotonic() - asked
        assert wait_until(
            lambda: getattr(queue.get_job(job_id), "status", None) == "cancelled", timeout=10
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err.decode(errors="replace")
    assert "aborted cancelled" in log.read_text()
    # Within one heartbeat interval (a claim's first beat may take two), plus the poll.
    assert delivered < 2 * INTERVAL + 1.0
    job = queue.get_job(job_id)
    assert job is not None
    assert (job.status, job.fail_reason, job.attempts) == ("cancelled", "operator", 1)
    (attempt,) = job.attempt_history
    assert attempt.outcome == "cancelled" and attempt.worker not in (None, queue.lease_owner)
