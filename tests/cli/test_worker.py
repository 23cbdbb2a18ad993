"""``durabl worker``: a real subprocess runs a module's declared jobs and drains on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import durabl
from durabl import JobQueue, backend_from_url
from durabl.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]

MODULE = """
import os
import pathlib

import durabl

OUT = pathlib.Path(os.environ["OUT_DIR"])


@durabl.job("cli-echo", concurrency=2)
def echo(job, ctx):
    (OUT / job.id).write_text("done")


@durabl.job("cli-slow")
def slow(job, ctx):
    (OUT / "slow-started").write_text("x")
    ctx.signal.wait(60)  # until the drain aborts it
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if not callable(durabl.job):
        pytest.skip("@durabl.job is not available in this tree yet")
    (tmp_path / "worker_jobs.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "out").mkdir()
    return tmp_path


def start_worker(project: Path, url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT_DIR": str(project / "out")}
    env.pop("DURABL_URL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "durabl", "worker", "worker_jobs", "--url", url, *args],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def completed_metric(port: int) -> float | None:
    """``durabl_jobs_completed_total{type="cli-echo"}`` once it reached 3, else None."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    for line in body.splitlines():
        if line.startswith('durabl_jobs_completed_total{type="cli-echo"}'):
            count = float(line.split()[-1])
            return count if count >= 3 else None
    return None


@pytest.fixture
def store(project: Path) -> Iterator[tuple[str, JobQueue]]:
    url = f"sqlite:///{project / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    yield url, queue
    queue.backend.close()


def test_worker_runs_declared_jobs_and_drains_on_sigterm(
    project: Path, store: tuple[str, JobQueue]
) -> None:
    url, queue = store
    ids = [queue.enqueue("cli-echo", {"i": i}) for i in range(3)]
    port = free_port()
    worker = start_worker(
        project, url, "--type", "cli-echo", "--no-scheduler", "--metrics-port", str(port)
    )
    try:
        assert worker.stdout is not None
        first = worker.stdout.readline()
        assert first.startswith(f"durabl worker: store {url}; processing cli-echo (x2);")
        assert f"reaper on; scheduler off; metrics on :{port}/metrics" in first
        wait_until(lambda: all((project / "out" / i).exists() for i in ids), timeout=20)
        assert wait_until(lambda: completed_metric(port), timeout=20, interval=0.05)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30 + 1)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert "drained; exiting" in out
    assert err.count("draining") == 1 and "SIGTERM received" in err
    assert queue.get_stats("cli-echo").completed == 3


def test_a_long_drain_reports_and_hands_the_job_back_within_the_bound(
    project: Path, store: tuple[str, JobQueue]
) -> None:
    url, queue = store
    job_id = queue.enqueue("cli-slow", {})
    worker = start_worker(project, url, "--shutdown-timeout", "3", "--no-reaper")
    try:
        wait_until((project / "out" / "slow-started").exists, timeout=20)
        worker.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        out, err = worker.communicate(timeout=10)
        took = time.monotonic() - signalled
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert took < 3 + 1.5
    assert "1 job(s) still running were handed back" in out
    assert f"waiting for 1 job(s): cli-slow {job_id}" in err  # the drain says what it waits for
    job = queue.get_job(job_id)
    assert job is not None and job.status == "pending"


def test_unknown_type_and_broken_module_are_one_line_errors(
    project: Path, store: tuple[str, JobQueue]
) -> None:
    url, _ = store
    unknown = start_worker(project, url, "--type", "nope")
    _, err = unknown.communicate(timeout=30)
    assert unknown.returncode == 2
    assert err.strip() == (
        "durabl worker: error: --type nope: not declared; declared: cli-echo, cli-slow"
    )
    (project / "broken_jobs.py").write_text("raise RuntimeError('no settings')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    broken = subprocess.run(
        [sys.executable, "-m", "durabl", "worker", "broken_jobs", "--url", url],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert broken.returncode == 1
    assert broken.stderr.strip() == (
        "durabl worker: error: cannot import broken_jobs: RuntimeError: no settings"
    )
