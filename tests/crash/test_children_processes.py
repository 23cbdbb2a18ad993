"""Child jobs across real processes over one store (a SQLite file; PostgreSQL tables of
the test's own; a MongoDB database of its own): the parent waits in this process holding
no thread, its children run in another process, and the last child's terminal write
there wakes the parent here. The parent's gather rechecks only every ten minutes, so
only that wake explains a finish within seconds; where the store pushes, this process's
worker polls once a minute too."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from durabl import Child, Job, JobQueue, Orchestrator, backend_from_url
from durabl.orchestrator import OrchestrationContext
from tests.crash.children_proc import TYPE
from tests.crash.test_crash_recovery import ROOT, url, wait_until

__all__ = ["url"]  # the store fixture, shared with the crash tests

pytestmark = pytest.mark.slow

#: SQLite pushes only inside one process: a wake from another is found by the next poll.
PUSHED_POLL, SQLITE_POLL = 60.0, 0.5


def test_children_finished_in_another_process_wake_their_parent(url: str, tmp_path: Path) -> None:
    push = {"use_change_streams": True} if url.startswith("mongodb") else {}
    queue = JobQueue(backend_from_url(url, **push))
    gathered: list[Any] = []
    finished = threading.Event()

    def fan(job: Job[Any], octx: OrchestrationContext) -> None:
        ids = octx.start_children("fan-out", [Child(TYPE, {"n": n}) for n in range(3)])
        gathered[:] = [(child.status, child.result) for child in octx.gather("fan-in", ids)]
        finished.set()

    poll = SQLITE_POLL if url.startswith("sqlite") else PUSHED_POLL
    Orchestrator(queue).define("fan", fan, concurrency=1, poll_interval=poll)
    log = tmp_path / "children.log"
    worker: subprocess.Popen[bytes] | None = None
    try:
        parent = queue.enqueue("fan", {}) or ""
        wait_until(lambda: getattr(queue.get_job(parent), "waiting_for", None) == "children:fan-in")
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.crash.children_proc", "--url", url, "--log", str(log)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert finished.wait(60), "the children's process did not wake the parent"
        assert gathered == [("completed", 0), ("completed", 2), ("completed", 4)]
        ended = [line for line in log.read_text().splitlines() if line.startswith("ended ")]
        assert len(ended) == 3
        wait_until(lambda: getattr(queue.get_job(parent), "status", None) == "completed", 20)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
        queue.shutdown(timeout=5)
        queue.backend.close()
