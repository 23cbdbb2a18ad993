"""Schedules across real processes over one store (a SQLite file; PostgreSQL tables of
the test's own; a MongoDB database of its own): however many schedulers run, killed and
restarted included, each tick enqueues exactly one job."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from durabl import JobQueue, backend_from_url
from tests.crash.test_crash_recovery import ROOT, url, wait_until

__all__ = ["url"]  # the store fixture, shared with the crash tests

pytestmark = pytest.mark.slow
SECOND = timedelta(seconds=1)
#: A MongoDB tick's job is inserted held (``run_at`` in the year 9999) and then released; a
#: scheduler stopped between the two leaves that copy to the next scheduler pass, which
#: never comes once the test has stopped them all (docs/schedules.md). It is no tick.
HELD = datetime(9000, 1, 1, tzinfo=timezone.utc)


class Scheduler:
    """One ``tests.crash.scheduler_proc`` subprocess."""

    def __init__(self, url: str, log: Path, catch_up: str) -> None:
        self.log = log
        self.popen = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.crash.scheduler_proc"),
                *("--url", url, "--log", str(log), "--every", "1", "--catch-up", catch_up),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def ready(self) -> bool:
        if self.popen.poll() is not None:
            err = self.popen.stderr.read().decode() if self.popen.stderr else ""
            raise AssertionError(f"scheduler exited early: {err}")
        return self.log.exists() and "ready" in self.log.read_text()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        self.popen.wait(10)
        if self.popen.stderr:
            self.popen.stderr.close()


Spawn = Callable[[str], Scheduler]


@pytest.fixture
def spawn(url: str, tmp_path: Path) -> Iterator[Spawn]:
    """Start a scheduler process over the test's store (killed at the end)."""
    started: list[Scheduler] = []

    def start(catch_up: str) -> Scheduler:
        proc = Scheduler(url, tmp_path / f"scheduler-{len(started)}.log", catch_up)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture
def view(url: str) -> Iterator[JobQueue]:
    queue = JobQueue(backend_from_url(url))
    yield queue
    queue.backend.close()


def ticks(queue: JobQueue) -> list[datetime]:
    jobs = queue.list_jobs(type="tick", limit=0)
    return sorted(job.run_at for job in jobs if job.run_at < HELD)


def assert_once_each(found: list[datetime]) -> None:
    doubled = [at for at, n in Counter(found).items() if n > 1]
    assert not doubled, f"ticks enqueued more than once: {doubled}"
    assert all(at.microsecond == 0 for at in found)


def run_for(seconds: float) -> None:
    time.sleep(seconds)  # the schedulers' own time passing is what is under test


def test_three_schedulers_enqueue_each_tick_exactly_once(spawn: Spawn, view: JobQueue) -> None:
    procs = [spawn("all") for _ in range(3)]
    wait_until(lambda: all(proc.ready() for proc in procs))
    run_for(5)
    for proc in procs:
        proc.kill(signal.SIGTERM)
    found = ticks(view)
    assert_once_each(found)
    assert len(found) >= 4
    assert found == [found[0] + n * SECOND for n in range(len(found))]  # none missing


def test_a_killed_and_restarted_scheduler_loses_and_doubles_no_tick(
    spawn: Spawn, view: JobQueue
) -> None:
    # catch_up="all": with "latest", schedulers held up past a whole tick on a loaded
    # machine skip that tick by design, which this test would count as lost.
    procs = [spawn("all") for _ in range(3)]
    wait_until(lambda: all(proc.ready() for proc in procs))
    run_for(2.5)
    procs[0].kill()  # SIGKILL, possibly mid-firing
    run_for(1.5)
    again = spawn("all")
    wait_until(again.ready)
    run_for(2.5)
    for proc in [*procs[1:], again]:
        proc.kill(signal.SIGTERM)
    found = ticks(view)
    assert_once_each(found)
    assert found == [found[0] + n * SECOND for n in range(len(found))]


def test_after_every_scheduler_died_catch_up_latest_enqueues_one_missed_tick(
    spawn: Spawn, view: JobQueue
) -> None:
    procs = [spawn("latest") for _ in range(2)]
    wait_until(lambda: all(proc.ready() for proc in procs))
    run_for(2.5)
    for proc in procs:
        proc.kill()  # SIGKILL: nothing runs the schedule for a while
    before = ticks(view)
    run_for(3.5)
    again = spawn("latest")
    wait_until(again.ready)
    wait_until(lambda: len(ticks(view)) > len(before))
    caught_up = ticks(view)[len(before)]
    run_for(2)
    again.kill(signal.SIGTERM)
    found = ticks(view)
    assert_once_each(found)
    assert found[: len(before)] == before
    # One job for the newest tick missed while down (not one per missed tick), then on.
    assert caught_up - before[-1] >= 3 * SECOND
    after = found[len(before) :]
    assert after == [after[0] + n * SECOND for n in range(len(after))]
