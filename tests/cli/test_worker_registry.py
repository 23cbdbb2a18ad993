"""The workers registry around a real worker process on a SQLite file: a ``durabl worker``
SIGTERM'd while a job ignores its signal is gone from ``durabl workers`` the moment it
exited (it showed ``alive`` for minutes), its ACTIVE count follows its run while it works,
and a script that exits without a shutdown takes its entry along."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import durabl
from durabl import JobQueue, backend_from_url
from durabl.testing import wait_until
from tests.cli.test_commands import durabl_cli

ROOT = Path(__file__).resolve().parents[2]
#: A drain that times out on the job within seconds; nothing else running in the worker.
FAST_DRAIN = ("--shutdown-timeout", "2", "--no-reaper", "--no-scheduler")

MODULE = """
import os
import pathlib
import threading

import durabl

OUT = pathlib.Path(os.environ["OUT_DIR"])


@durabl.job("registry-slow", heartbeat_interval=10)
def slow(job, ctx):
    (OUT / "slow-started").write_text("x")
    threading.Event().wait(60)  # ignores ctx.signal: the drain times out on it
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if not callable(durabl.job):
        pytest.skip("@durabl.job is not available in this tree yet")
    (tmp_path / "registry_jobs.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "out").mkdir()
    return tmp_path


@pytest.fixture
def store(project: Path) -> Iterator[tuple[str, JobQueue]]:
    url = f"sqlite:///{project / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    yield url, queue
    queue.backend.close()


def child_env(project: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT_DIR": str(project / "out")}
    env.pop("DURABL_URL", None)
    return env


def registry(url: str) -> list[dict[str, object]]:
    """What ``durabl workers --json`` says, as an operator would look."""
    shown = durabl_cli("workers", "--json", url=url)
    assert shown.returncode == 0, shown.stderr
    rows: list[dict[str, object]] = json.loads(shown.stdout)
    return rows


def test_a_sigtermed_worker_is_gone_from_the_registry_when_it_exits(
    project: Path, store: tuple[str, JobQueue]
) -> None:
    url, queue = store
    queue.enqueue("registry-slow", {})
    worker = subprocess.Popen(
        [sys.executable, "-m", "durabl", "worker", "registry_jobs", "--url", url, *FAST_DRAIN],
        cwd=project,
        env=child_env(project),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until((project / "out" / "slow-started").exists, timeout=20)
        # While it works, its entry shows the run (within a second, not 10 s later).
        assert wait_until(lambda: [w.active for w in queue.list_workers()] == [1], timeout=5)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=10)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert "1 job(s) still running were handed back" in out
    assert queue.list_workers() == []
    assert registry(url) == []


def test_a_script_that_exits_without_a_shutdown_takes_its_entry_along(
    project: Path, store: tuple[str, JobQueue]
) -> None:
    url, queue = store
    script = (
        "import sys\n"
        "from durabl import JobQueue, backend_from_url\n"
        "queue = JobQueue(backend_from_url(sys.argv[1]))\n"
        "queue.process('mail', lambda job, ctx: None)\n"
        "print(len(queue.list_workers()))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script, url],
        env=child_env(project),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "1"  # it was registered while it ran
    assert queue.list_workers() == []
