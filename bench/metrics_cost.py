"""What ``durabl.metrics.install(queue)`` costs: no-op jobs on SQLite with and without it.

Each round runs N no-op jobs through 4 worker threads on a fresh SQLite file, once plain
and once with the metrics installed (alternating, so drift hits both), and prints the
median jobs/s of each and the difference. Run: ``.venv/bin/python bench/metrics_cost.py
[--jobs N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from durabl import JobQueue, SqliteJobQueue  # noqa: E402


def one_run(jobs: int, with_metrics: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        queue = JobQueue(SqliteJobQueue(str(Path(tmp) / "jobs.db")))
        if with_metrics:
            from prometheus_client import CollectorRegistry

            from durabl import metrics

            metrics.install(queue, registry=CollectorRegistry())
        for _ in range(jobs):
            queue.enqueue("noop", {})
        done = threading.Event()
        count = [0]
        lock = threading.Lock()

        def noop(job: Any, ctx: Any) -> None:
            with lock:
                count[0] += 1
                if count[0] == jobs:
                    done.set()

        started = time.monotonic()
        queue.process("noop", noop, concurrency=4, poll_interval=0.05)
        done.wait(120)
        elapsed = time.monotonic() - started
        queue.shutdown(5)
        queue.backend.close()
        return jobs / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    plain: list[float] = []
    measured: list[float] = []
    for _ in range(args.rounds):
        plain.append(one_run(args.jobs, False))
        measured.append(one_run(args.jobs, True))
    a, b = statistics.median(plain), statistics.median(measured)
    print(f"no-op jobs on SQLite, 4 threads, {args.jobs} jobs, median of {args.rounds} rounds")
    print(f"  without metrics: {a:8.0f} jobs/s")
    print(f"  with metrics:    {b:8.0f} jobs/s  ({(b - a) / a:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
