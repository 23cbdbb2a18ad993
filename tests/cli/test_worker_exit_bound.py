"""``durabl worker --shutdown-timeout T`` exits within T plus about a second and a half
when its store went down while a job ran, then SIGTERM came: the drain ends at T + 1 s
(``DRAIN_GRACE``), and nothing after it (removing the registry entry, closing the store,
the interpreter's exit) waits for a server that does not answer. On MongoDB it used to
take T + 7 s (the release, the registry removal and ``MongoClient.close()`` each waited
for server selection).

Each store runs privately, for the test to stop: a SecantusDB wire server, a throwaway
PostgreSQL cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import durabl
from durabl import JobQueue, backend_from_url
from durabl.runtime.shutdown import DRAIN_GRACE
from durabl.testing import wait_until
from tests.conftest import mongo_required, postgres_required

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 2
#: After the drain's bound: pymongo's monitor threads take up to half a second to notice a
#: closed client, the interpreter's exit a little, scheduling on a busy machine the rest.
#: (The worker ends itself with exit code 1 at T + DRAIN_GRACE + 1.5 s whatever holds it.)
EXIT_ALLOWANCE = 1.0

MODULE = """
import os
import pathlib
import threading

import durabl

OUT = pathlib.Path(os.environ["OUT_DIR"])


@durabl.job("exit-slow", heartbeat_interval=5)
def slow(job, ctx):
    (OUT / "slow-started").write_text("x")
    threading.Event().wait(60)  # ignores ctx.signal: the drain times out on it
"""


@dataclass
class Store:
    url: str
    stop: Callable[[], None]


def mongodb_store() -> Iterator[Store]:
    from tests.mongo_server import NoServerError, WireServer

    try:
        server = WireServer.start()
    except NoServerError as exc:
        if mongo_required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield Store(server.url.replace("/?", "/exitbound?"), server.stop)
    finally:
        server.stop()


def postgresql_store() -> Iterator[Store]:
    from tests.postgres.server import NoServerError, ThrowawayServer

    try:
        server = ThrowawayServer.start()
    except NoServerError as exc:
        if postgres_required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield Store(server.url, server.stop)
    finally:
        server.stop()


@pytest.fixture(params=["mongodb", "postgresql"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    yield from {"mongodb": mongodb_store, "postgresql": postgresql_store}[request.param]()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if not callable(durabl.job):
        pytest.skip("@durabl.job is not available in this tree yet")
    (tmp_path / "exit_jobs.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "out").mkdir()
    return tmp_path


def test_a_worker_whose_store_is_down_exits_within_its_bound(project: Path, store: Store) -> None:
    queue = JobQueue(backend_from_url(store.url))
    try:
        queue.enqueue("exit-slow", {})
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT_DIR": str(project / "out")}
        env.pop("DURABL_URL", None)
        command = [sys.executable, "-m", "durabl", "worker", "exit_jobs", "--url", store.url]
        options = ["--shutdown-timeout", str(TIMEOUT), "--no-reaper", "--no-scheduler"]
        worker = subprocess.Popen(
            [*command, *options],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait_until((project / "out" / "slow-started").exists, timeout=30)
            # Started for good: its registry entry shows the run (the startup's writes done).
            assert wait_until(lambda: [w.active for w in queue.list_workers()] == [1], timeout=10)
        except BaseException:
            worker.kill()
            raise
    finally:
        queue.backend.close()
    store.stop()
    signalled = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    try:
        out, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    took = time.monotonic() - signalled
    assert took <= TIMEOUT + DRAIN_GRACE + EXIT_ALLOWANCE, (
        f"exited {took:.1f} s after SIGTERM with --shutdown-timeout {TIMEOUT}\n{err}"
    )
    assert worker.returncode == 0, err  # by itself, not stopped by its exit deadline
    assert "drain timed out; 1 job(s) still running were handed back" in out
    assert "Traceback" not in err, err
