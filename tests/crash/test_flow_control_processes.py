"""Flow control across real processes over one store (a SQLite file; PostgreSQL tables of
the test's own; a MongoDB database of its own): two worker processes of four threads
each. A concurrency key's limit and a type's rate limit hold engine-wide. Concurrency is
read from the handlers' own logs (each run lies inside its claim); starts per window from
each job's attempt history, on the store's clock, which is the clock the store counts the
window by."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, backend_from_url
from tests.crash.test_crash_recovery import ROOT, settled, url, wait_until

__all__ = ["url"]  # the store fixture, shared with the crash tests

pytestmark = pytest.mark.slow


class Worker:
    """One ``tests.crash.flow_proc`` subprocess."""

    def __init__(self, url: str, log: Path, hold: float) -> None:
        self.log = log
        self.popen = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.crash.flow_proc"),
                *("--url", url, "--log", str(log), "--threads", "4", "--hold", str(hold)),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def ready(self) -> bool:
        if self.popen.poll() is not None:
            err = self.popen.stderr.read().decode() if self.popen.stderr else ""
            raise AssertionError(f"worker exited early: {err}")
        return self.log.exists() and "ready" in self.log.read_text()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self.popen.stderr:
            self.popen.stderr.close()


@pytest.fixture
def queue(url: str) -> Iterator[JobQueue]:
    q = JobQueue(backend_from_url(url))
    q.startup()  # the schema exists before the workers start
    yield q
    q.backend.close()


def run_workers(url: str, tmp_path: Path, queue: JobQueue, hold: float, count: int) -> None:
    workers = [Worker(url, tmp_path / f"w{n}.log", hold) for n in range(2)]
    try:
        wait_until(lambda: all(w.ready() for w in workers), timeout=60)
        wait_until(lambda: queue.count_jobs(status="completed") == count, timeout=120)
        assert settled(queue)
    finally:
        for w in workers:
            w.stop()


def spans(queue: JobQueue) -> dict[str, list[tuple[datetime, datetime, str]]]:
    """Each completed job's one claim: (claimed, ended, worker), by its data's key. A job
    claimed more than once lost its lease (reaped while its worker still ran it): that is
    reported as such, not as an overlap of two claims."""
    by_key: dict[str, list[tuple[datetime, datetime, str]]] = defaultdict(list)
    for job in queue.list_jobs(type="flow", limit=0):
        assert job.status == "completed"
        assert len(job.attempt_history) == 1, (
            f"job {job.data['n']} was claimed {len(job.attempt_history)} times: a lease was "
            f"lost (reaped while its holder ran), not a double claim: {job.attempt_history}"
        )
        (attempt,) = job.attempt_history
        assert attempt.started_at is not None
        by_key[job.data["key"]].append((attempt.started_at, attempt.ended_at, attempt.worker or ""))
    return by_key


def most_at_once(intervals: Sequence[tuple[Any, Any, str]]) -> int:
    """The most intervals open at one instant (an end and a start at the same instant do
    not overlap: the slot was freed, then taken)."""
    events = sorted([(s, 1) for s, _, _ in intervals] + [(e, -1) for _, e, _ in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def runs(tmp_path: Path) -> dict[str, list[tuple[float, float, str]]]:
    """Each handler run the workers logged: (start, end, process), by key. A job whose
    handler ran twice lost its lease (the reaper gave it to another worker while the first
    still ran it): that fails here as a lease loss, so an overlap found afterwards is
    between two different jobs, each run once: two claims that held the key at once."""
    by_key: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    by_job: dict[str, list[str]] = defaultdict(list)
    for log in sorted(tmp_path.glob("w*.log")):
        for line in log.read_text().splitlines():
            if line.startswith("run "):
                _, n, key, start, end = line.split()
                by_key[key].append((float(start), float(end), log.name))
                by_job[n].append(f"{log.name} {start}-{end}")
    twice = {n: where for n, where in by_job.items() if len(where) > 1}
    assert not twice, f"handlers ran more than once (a lease loss, not a double claim): {twice}"
    return by_key


def overlapping(intervals: Sequence[tuple[Any, Any, str]]) -> list[Any]:
    """The pairs of runs (of different jobs) that overlap, for a failure message."""
    ordered = sorted(intervals)
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1 :] if b[0] < a[1]]


@pytest.mark.timeout(240)
def test_a_key_never_runs_more_than_its_limit_across_processes(
    url: str, tmp_path: Path, queue: JobQueue
) -> None:
    limits = {"a": 1, "b": 1, "c": 1, "d": 2}
    for n in range(80):
        key = "abcd"[n % 4]
        queue.enqueue(
            "flow", {"key": key, "n": n}, concurrency_key=key, concurrency_limit=limits[key]
        )
    run_workers(url, tmp_path, queue, hold=0.03, count=80)
    assert {key: len(v) for key, v in spans(queue).items()} == dict.fromkeys("abcd", 20)
    # The handlers' own times (one wall clock): each run lies inside its claim, so runs of
    # one key overlapping beyond its limit would mean the store let too many claims hold it.
    by_key = runs(tmp_path)
    assert {key: len(v) for key, v in by_key.items()} == dict.fromkeys("abcd", 20)
    for key, intervals in by_key.items():
        assert most_at_once(intervals) <= limits[key], (
            f"a double claim: different jobs of key {key!r} ran at once beyond its limit "
            f"{limits[key]}: {overlapping(intervals)}"
        )
    every = [i for v in by_key.values() for i in v]
    assert most_at_once(every) > 2  # different keys ran side by side
    assert len({w for _, _, w in every}) == 2  # both processes took part


@pytest.mark.timeout(240)
def test_a_rate_limit_holds_across_processes(url: str, tmp_path: Path, queue: JobQueue) -> None:
    queue.set_rate_limit("flow", 4, 1)
    for n in range(24):
        queue.enqueue("flow", {"key": "r", "n": n})
    run_workers(url, tmp_path, queue, hold=0.0, count=24)
    starts = [s for s, _, _ in spans(queue)["r"]]
    per_window = Counter(int(s.timestamp()) for s in starts)
    assert max(per_window.values()) <= 4
    assert len(per_window) >= 6
