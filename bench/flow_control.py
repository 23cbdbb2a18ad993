"""What flow control costs on SQLite.

* throughput: no-op jobs through one ``JobQueue`` with four worker threads on a SQLite
  file, without concurrency keys and with 1,000 keys at limit 1 (the jobs spread over the
  keys round robin), best of ``--runs``;
* held-back polls: one key held by an active job and ``--held`` of its jobs waiting; the
  poller's claims while they wait, and whether any of them wrote to the file (SQLite's
  ``PRAGMA data_version`` read from another connection changes with every commit that
  changed something).

Run: ``.venv/bin/python bench/flow_control.py [--jobs N] [--runs R]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from durabl import JobQueue, SqliteJobQueue  # noqa: E402


def noop(job: Any, ctx: Any) -> None:
    return None


def throughput(jobs: int, keys: int) -> float:
    """Jobs per second, from the first start to the last completion."""
    with tempfile.TemporaryDirectory() as tmp:
        backend = SqliteJobQueue(f"{tmp}/jobs.sqlite3")
        queue = JobQueue(backend)
        for n in range(jobs):
            if keys:
                queue.enqueue("noop", {"n": n}, concurrency_key=f"k{n % keys}")
            else:
                queue.enqueue("noop", {"n": n})
        started = time.perf_counter()
        queue.process("noop", noop, concurrency=4, poll_interval=0.05)
        done = threading.Event()
        while not done.wait(0.02):
            if backend.count_jobs(status="completed") == jobs:
                done.set()
        elapsed = time.perf_counter() - started
        queue.shutdown(10)
        backend.close()
        return jobs / elapsed


def held_polls(held: int, polls: int) -> tuple[int, int, float]:
    """(claims made while the key was full, whether they wrote, seconds per poll)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/jobs.sqlite3"
        backend = SqliteJobQueue(path)
        queue = JobQueue(backend)
        for n in range(held + 1):
            queue.enqueue("held", {"n": n}, concurrency_key="busy")
        (running,) = backend.claim("held", limit=1, lease_owner="bench")
        watcher = sqlite3.connect(path)
        before = watcher.execute("PRAGMA data_version").fetchone()[0]
        started = time.perf_counter()
        claimed = 0
        for _ in range(polls):
            claimed += len(backend.claim("held", limit=8, lease_owner="bench"))
        per_poll = (time.perf_counter() - started) / polls
        after = watcher.execute("PRAGMA data_version").fetchone()[0]
        watcher.close()
        backend.complete(running.id, running.claim_token)
        backend.close()
        return claimed, int(after != before), per_poll


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--held", type=int, default=1000)
    args = parser.parse_args()
    plain = max(throughput(args.jobs, 0) for _ in range(args.runs))
    keyed = max(throughput(args.jobs, 1000) for _ in range(args.runs))
    print(f"no keys:            {plain:8.0f} jobs/s")
    print(f"1,000 keys limit 1: {keyed:8.0f} jobs/s  ({keyed / plain:.2f}x)")
    claimed, wrote, per_poll = held_polls(args.held, 100)
    print(
        f"100 polls, {args.held} held-back jobs: {claimed} claimed, writes: {wrote}, "
        f"{per_poll * 1000:.2f} ms a poll"
    )


if __name__ == "__main__":
    main()
