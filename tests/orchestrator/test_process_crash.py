"""A worker process killed between steps: the next worker resumes after the last journaled
step. Real subprocesses over one SQLite file."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from durabl import SqliteJobQueue
from durabl.model.options import build_new_job

ROOT = Path(__file__).resolve().parents[2]


def worker(url: str, log: Path, die_in: str = "") -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.orchestrator.proc", "--url", url, "--log", str(log)]
        + (["--die-in", die_in] if die_in else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 9), done.stderr
    return done.returncode


def test_a_killed_worker_leaves_completed_steps_journaled_for_the_next(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    url = f"sqlite:///{path}"
    log = tmp_path / "steps.log"
    store = SqliteJobQueue(path)
    try:
        job_id = store.enqueue(build_new_job("crashy", {})).job_id or ""
        assert worker(url, log, die_in="sync") == 9  # killed after sync's side effect
        job = store.get_job(job_id)
        assert job is not None and job.status == "active" and job.attempts == 1
        assert [e["name"] for e in job.journal if e["kind"] == "step"] == [
            "create-customer",
            "create-sub",
        ]
        threading.Event().wait(1.2)  # let the 1 s lease expire
        assert store.reap(1.0).recovered == 1
        assert worker(url, log) == 0
        job = store.get_job(job_id)
        assert job is not None and job.status == "completed" and job.attempts == 2
        lines = log.read_text().splitlines()
        assert [line.split()[0] for line in lines] == [
            "create-customer",
            "create-sub",
            "sync",
            "sync",
        ]
        assert lines[2] == lines[3] == f"sync {job_id}:sync:2"  # the same key both times
    finally:
        store.close()
