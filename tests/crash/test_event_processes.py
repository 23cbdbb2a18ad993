"""Events across real processes over one store (a SQLite file; PostgreSQL tables of the
test's own; a MongoDB database of its own): processes that declared nothing start the
jobs of the subscriptions a worker's queue recorded, and several of them sending the
same keyed event at once start one job of each subscribed type between them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from durabl import JobQueue
from tests.crash.event_proc import EVENT
from tests.crash.test_crash_recovery import ROOT, queue, url, wait_until

__all__ = ["queue", "url"]  # the store fixtures, shared with the crash tests

pytestmark = pytest.mark.slow
SENDERS = 4


def test_processes_racing_one_keyed_event_start_one_job_of_each_type(
    queue: JobQueue, url: str, tmp_path: Path
) -> None:
    for type in ("sync-invoice", "mail-invoice"):
        queue.register(type, lambda job, ctx: None, on_event=EVENT)  # the worker's declarations
    senders = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.crash.event_proc", "--url", url, "--dir", str(tmp_path)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
        )
        for _ in range(SENDERS)
    ]
    try:
        ready = {str(p.pid) for p in senders}
        wait_until(lambda: all((tmp_path / pid).exists() for pid in ready))
        (tmp_path / "go").write_text("go")
        for sender in senders:
            _, err = sender.communicate(timeout=60)
            assert sender.returncode == 0, err.decode()
    finally:
        for sender in senders:
            if sender.poll() is None:
                sender.kill()
                sender.wait(10)
    returned = [i for pid in ready for i in json.loads((tmp_path / f"{pid}.ids").read_text())]
    jobs = queue.list_jobs()
    assert Counter(job.type for job in jobs) == {"sync-invoice": 1, "mail-invoice": 1}
    assert sorted(returned) == sorted(job.id for job in jobs)
