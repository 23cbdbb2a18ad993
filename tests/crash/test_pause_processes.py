"""Pausing across real processes over one store (a SQLite file, PostgreSQL tables of the
test's own, a MongoDB database of its own on the wire server): a pause made in this
process stops a worker process's claims, and a resume lets it run them again, at once on
a store that pushes (the worker polls only every 30 s there, so only push explains it)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from durabl import JobQueue, backend_from_url
from durabl.model.pauses import PAUSED_TYPES_REFRESH
from tests.crash.test_crash_recovery import ROOT, is_mongo, url, wait_until

__all__ = ["url"]  # the store fixture, shared with the crash tests

#: How long the test watches the paused worker do nothing: several of its polls.
QUIET = 2.0


def statuses(queue: JobQueue, ids: list[str]) -> list[str]:
    found = [queue.get_job(job_id) for job_id in ids]
    return [job.status if job else "gone" for job in found]


@pytest.mark.parametrize("change_streams", [False, True], ids=["poll", "push"])
def test_a_pause_in_one_process_stops_claims_in_another(
    url: str, tmp_path: Path, change_streams: bool
) -> None:
    mongo = is_mongo(url)
    if change_streams and not mongo:
        pytest.skip("change streams are MongoDB's push; the other stores always push")
    # MongoDB without change streams has no push: the worker polls often, and sees a
    # pause or a resume within its set's refresh. Where the store pushes (SQLite,
    # PostgreSQL, MongoDB with change streams) the worker hardly polls: a resume must
    # reach it by push (on MongoDB its watcher re-reads the paused set while one is).
    poll = 0.2 if mongo and not change_streams else 30.0
    queue = JobQueue(backend_from_url(url))
    queue.startup()
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.crash.pause_proc"),
            *("--url", url, "--log", str(log), "--poll", str(poll)),
            *(["--change-streams"] if change_streams else []),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: log.exists() and "ready" in log.read_text(), timeout=60)
        first = queue.enqueue("work", {"n": 0}) or ""
        wait_until(lambda: statuses(queue, [first]) == ["completed"], timeout=30)

        queue.pause("work")
        if mongo:  # the worker's set of paused types is refreshed every few seconds
            threading.Event().wait(PAUSED_TYPES_REFRESH + 1)
        held = [queue.enqueue("work", {"n": n}) or "" for n in range(1, 6)]
        threading.Event().wait(QUIET)
        assert statuses(queue, held) == ["pending"] * len(held)
        assert worker.poll() is None

        resumed_at = time.monotonic()
        queue.resume("work")
        wait_until(lambda: statuses(queue, held) == ["completed"] * len(held), timeout=30)
        took = time.monotonic() - resumed_at
        assert took < 10, f"the resumed jobs waited {took:.1f} s"
    finally:
        worker.kill()
        worker.wait(10)
        if worker.stderr:
            worker.stderr.close()
        queue.backend.close()
