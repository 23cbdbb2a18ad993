"""Bulk enqueue: ``queue.enqueue_many`` against a loop of ``queue.enqueue()``, per store,
and Procrastinate's ``batch_defer`` on the same PostgreSQL.

    .venv/bin/python bench/bulk_enqueue.py --jobs 100000 --loop-jobs 10000

Each contender stores no-op jobs (``{"i": n}``) into a fresh store: a SQLite file in a
temporary directory, a throwaway PostgreSQL table (Procrastinate: a throwaway schema), a
fresh database on a SecantusDB wire server (a Python server: its figures are relative
only; ``--mongo-jobs`` keeps it short). ``enqueue_many`` gets the jobs in calls of
``--call`` items (it writes them in chunks of 1,000); the loop makes one ``enqueue()``
per job, each its own transaction, over ``--loop-jobs`` jobs (fewer than ``--jobs`` when
the loop would take minutes: its rate does not depend on the count). ``keyed`` is
``enqueue_many`` with a distinct ``dedupe_key`` per job. Procrastinate defers in calls of
``--call`` jobs, as ``batch_defer_async`` takes them. The table goes to stdout and
``bench/results/bulk-enqueue.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

from peers.common import Skip  # noqa: E402
from peers.pg import POSTGRES_URL, server_facts, throwaway_schema  # noqa: E402

RESULTS = BENCH / "results"


def _jobs(count: int, keyed: bool = False) -> list[tuple[str, dict[str, int], dict[str, str]]]:
    return [("noop", {"i": n}, {"dedupe_key": f"k{n}"} if keyed else {}) for n in range(count)]


def _timed(store: Callable[[], int]) -> tuple[int, float]:
    began = time.perf_counter()
    stored = store()
    return stored, time.perf_counter() - began


def _bulk(queue: Any, jobs: list[Any], call: int) -> int:
    stored = 0
    for start in range(0, len(jobs), call):
        stored += sum(
            job_id is not None for job_id in queue.enqueue_many(jobs[start : start + call])
        )
    return stored


def _loop(queue: Any, jobs: list[Any]) -> int:
    return sum(queue.enqueue(type, data, **options) is not None for type, data, options in jobs)


@contextmanager
def _store(kind: str, directory: Path) -> Iterator[Any]:
    """A fresh, started store of ``kind``; closed and removed on the way out."""
    if kind == "sqlite":
        from durabl import SqliteJobQueue

        store: Any = SqliteJobQueue(str(directory / f"{uuid.uuid4().hex}.db"))
        store.startup()
        try:
            yield store
        finally:
            store.close()
    elif kind == "postgres":
        from durabl import PostgresJobQueue
        from tests.conftest import drop_postgres_tables

        table = f"bench_bulk_{uuid.uuid4().hex[:8]}"
        store = PostgresJobQueue(POSTGRES_URL, table=table, listen_notify=False)
        store.startup()
        try:
            yield store
        finally:
            store.close()
            drop_postgres_tables(table)
    elif kind == "mongo":
        from burndown_durabl import wire_server
        from pymongo import MongoClient

        from durabl import MongoJobQueue

        with wire_server() as (url, _):
            client: Any = MongoClient(url)
            store = MongoJobQueue(client[f"bench_bulk_{uuid.uuid4().hex[:8]}"], owns_client=True)
            store.startup()
            try:
                yield store
            finally:
                store.close()
    else:
        raise ValueError(kind)


def measure_durabl(kind: str, jobs: int, loop_jobs: int, call: int) -> list[dict[str, Any]]:
    from durabl import JobQueue

    rows = []
    with tempfile.TemporaryDirectory(prefix="durabl-bulk-") as directory:
        runs: list[tuple[str, int, Callable[[Any], int]]] = [
            ("enqueue_many", jobs, lambda q: _bulk(q, _jobs(jobs), call)),
            ("enqueue_many keyed", jobs, lambda q: _bulk(q, _jobs(jobs, keyed=True), call)),
            ("loop of enqueue()", loop_jobs, lambda q: _loop(q, _jobs(loop_jobs))),
        ]
        for method, count, run in runs:
            with _store(kind, Path(directory)) as store:
                queue = JobQueue(store)
                stored, seconds = _timed(lambda: run(queue))  # noqa: B023 - called at once
                queue.shutdown(timeout=5)
            assert stored == count, f"{kind} {method}: {stored} of {count} stored"
            rows.append(_row(kind, method, count, seconds))
    return rows


def measure_procrastinate(jobs: int, call: int) -> dict[str, Any]:
    from peers.procrastinate_peer import _app, _define

    with throwaway_schema("bulk_procrastinate") as schema:
        app = _app(schema, 2)
        noop = _define(app, lambda t, started: None)

        async def defer() -> float:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()
                began = time.perf_counter()
                for start in range(0, jobs, call):
                    size = min(call, jobs - start)
                    await noop.batch_defer_async(*({"t": 0.0} for _ in range(size)))
                return time.perf_counter() - began

        seconds = asyncio.run(defer())
    return _row("postgres", "procrastinate batch_defer_async", jobs, seconds)


def _row(store: str, method: str, jobs: int, seconds: float) -> dict[str, Any]:
    return {
        "store": store,
        "method": method,
        "jobs": jobs,
        "seconds": seconds,
        "rate": jobs / seconds,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table: each row's rate, and its speed-up over its store's loop."""
    loops = {r["store"]: r["rate"] for r in rows if r["method"] == "loop of enqueue()"}
    lines = [
        "| store | method | jobs | seconds | jobs/s | vs the loop |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        times = r["rate"] / loops[r["store"]] if r["store"] in loops else float("nan")
        lines.append(
            f"| {r['store']} | {r['method']} | {r['jobs']:,} | {r['seconds']:.2f} | "
            f"{r['rate']:,.0f} | {times:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per bulk contender")
    parser.add_argument("--loop-jobs", type=int, default=10_000, help="jobs of the loop")
    parser.add_argument("--mongo-jobs", type=int, default=5_000, help="bulk jobs on MongoDB")
    parser.add_argument("--call", type=int, default=10_000, help="jobs per enqueue_many call")
    parser.add_argument("--stores", default="sqlite,postgres,mongo")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for kind in args.stores.split(","):
        jobs = args.mongo_jobs if kind == "mongo" else args.jobs
        loop_jobs = min(args.loop_jobs, jobs)
        try:
            rows.extend(measure_durabl(kind, jobs, loop_jobs, args.call))
        except Skip as skip:
            notes.append(f"{kind}: {skip}")
        if kind == "postgres":
            try:
                rows.append(measure_procrastinate(args.jobs, args.call))
            except Skip as skip:
                notes.append(f"procrastinate: {skip}")
    print(table(rows))
    for note in notes:
        print(f"skipped: {note}")
    facts = {"python": platform.python_version(), "machine": platform.machine()}
    if any(r["store"] == "postgres" for r in rows):
        facts["postgres"] = server_facts()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "bulk-enqueue.json"
    out.write_text(json.dumps({"args": vars(args), "facts": facts, "rows": rows}, indent=2))
    print(f"written: {out.relative_to(BENCH.parent)}")


if __name__ == "__main__":
    main()
