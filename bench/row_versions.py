"""Row versions per job on PostgreSQL: how many times the job table's row of one no-op
job is updated between its enqueue and its completion, and how many of those updates are
HOT (heap-only: no new index entries).

Each update is a dead tuple for vacuum and, unless HOT, an entry in every index, so this
is the server's work per job that Python profiling cannot see (docs/benchmarks.md, "A
million jobs, start to finish"). N jobs are enqueued with ``enqueue_many`` into a table of
their own, run by one ``queue.process`` with ``--concurrency`` threads (read ahead on, as
in production), and the table's counters are read from ``pg_stat_user_tables`` once every
connection has closed (a backend reports its counters when it exits).

Run: ``.venv/bin/python bench/row_versions.py [--jobs 5000] [--concurrency 8]``
(PostgreSQL at ``DURABL_TEST_POSTGRES_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``; the table is dropped after).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from typing import Any

import psycopg

from durabl import Job, JobContext, JobQueue, backend_from_url

POSTGRES_URL = os.environ.get(
    "DURABL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def run(jobs: int, concurrency: int) -> dict[str, float]:
    table = f"durabl_rows_{uuid.uuid4().hex[:8]}"
    queue = JobQueue(backend_from_url(f"{POSTGRES_URL}?table={table}"))
    queue.startup()
    try:
        queue.enqueue_many([("noop", {"i": i}) for i in range(jobs)])
        finished = threading.Event()
        lock, ran = threading.Lock(), [0]

        def handler(job: Job[Any], ctx: JobContext) -> None:
            with lock:
                ran[0] += 1
                if ran[0] == jobs:
                    finished.set()

        started = time.perf_counter()
        queue.process("noop", handler, concurrency=concurrency)
        assert finished.wait(600), "the jobs did not all run"
        queue.shutdown(30)
        seconds = time.perf_counter() - started
        queue.backend.close()
        return {"seconds": seconds, **_counters(table, jobs)}
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{table}%",)
            ).fetchall():
                conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')


def _counters(table: str, jobs: int) -> dict[str, float]:
    """The table's update counters once the pool's backends have exited and reported."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        deadline, last = time.monotonic() + 20, -1
        while True:
            row = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s",
                (table,),
            ).fetchone()
            updates, hot = row if row else (0, 0)
            # Every job was claimed and completed (two updates at least), and a second
            # read a stats interval later counts no more: every backend has reported.
            if (updates >= 2 * jobs and updates == last) or time.monotonic() > deadline:
                break
            last = updates
            time.sleep(1.1)
            conn.execute("SELECT pg_stat_clear_snapshot()")
    return {"updates_per_job": updates / jobs, "hot_share": hot / max(updates, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    result = run(args.jobs, args.concurrency)
    print(
        f"{args.jobs} jobs, {args.concurrency} threads: {result['seconds']:.2f} s, "
        f"{result['updates_per_job']:.2f} updates per job, {result['hot_share']:.0%} HOT"
    )


if __name__ == "__main__":
    main()
