"""durabl on PostgreSQL: ``PostgresJobQueue(url, table="<schema>.durabl_jobs")`` +
``JobQueue.process(...)``.

Only the public API and the store's defaults: a psycopg pool of 1-10 connections, push
pickup by LISTEN/NOTIFY (``listen_notify=True``; one listener connection per queue, the
poll every 60 s as the safety net), ``concurrency`` worker threads fed by one poller per
job type that claims a batch in one statement, completions written in batches by the
pool's completion thread.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peers.common import (
    NOOP,
    Library,
    Measured,
    Processes,
    Recorder,
    Skip,
    child_env,
    latency_of,
    produce_paced,
    python_c,
    throughput_of,
    wait_until,
)
from peers.pg import POSTGRES_URL, connect, throwaway_schema

if TYPE_CHECKING:
    from durabl import Job, JobContext, JobQueue

SHUTDOWN_TIMEOUT = 10.0
TABLE = "durabl_jobs"


def _open(schema: str) -> JobQueue:
    try:
        from durabl import JobQueue
        from durabl.stores.postgres import PostgresJobQueue
    except ImportError as exc:
        raise Skip(f"durabl's PostgreSQL store is not importable ({exc})") from exc
    queue = JobQueue(PostgresJobQueue(POSTGRES_URL, table=f"{schema}.{TABLE}"))
    queue.startup()
    return queue


def _close(queue: JobQueue) -> None:
    try:
        queue.shutdown(timeout=SHUTDOWN_TIMEOUT)
    finally:
        queue.backend.close()


def _completed(schema: str) -> int:
    with connect() as conn:
        row = conn.execute(
            f"SELECT count(*) FROM \"{schema}\".{TABLE} WHERE status = 'completed'"
        ).fetchone()
    return int(row[0])


def produce(schema: str, count: str, rate: str) -> None:
    """The second-process producer (``python -c``): same table, its own queue; each
    enqueue is one transaction whose NOTIFY fires at commit."""
    queue = _open(schema)
    try:
        produce_paced(int(count), float(rate), lambda t: queue.enqueue(NOOP, {"t": t}))
    finally:
        _close(queue)


class DurablPostgres(Library):
    name = "durabl"
    unit = "thread"
    polling = (
        "defaults: LISTEN/NOTIFY on (listen_notify=True), so the poll interval is the 60 s "
        "safety net; pool 1-10 connections; one poller per type claims a batch for all its "
        "threads; completions batched by the completion thread"
    )

    def __init__(self) -> None:
        #: (workers, seconds from starting the workers to every completion committed)
        self.committed_s: list[tuple[int, float]] = []

    def version(self) -> str:
        try:
            import durabl
            from durabl.stores.postgres import PostgresJobQueue  # noqa: F401
        except ImportError as exc:
            raise Skip(f"durabl's PostgreSQL store is not importable ({exc})") from exc
        connect().close()
        return str(durabl.__version__)

    def throughput(self, workdir: Path, jobs: int, workers: int, timeout: float) -> Measured:
        with throwaway_schema("durabl") as schema:
            queue = _open(schema)
            try:
                for i in range(jobs):
                    queue.enqueue(NOOP, {"i": i})
                recorder = Recorder(jobs)

                def handler(job: Job[Any], ctx: JobContext) -> None:
                    recorder.record(0.0, time.time())

                began = time.time()
                queue.process(NOOP, handler, concurrency=workers)
                jobs_per_s, wall = throughput_of(recorder.wait(timeout), jobs, began)
                # The last terminal writes land just after the last handler returns.
                wait_until(lambda: _completed(schema) >= jobs, 30.0, "all jobs completed")
                # Completions are written in batches after the handlers return: how long
                # after the workers started the last one was seen committed (20 ms polls).
                self.committed_s.append((workers, time.time() - began))
            finally:
                _close(queue)
        return Measured(jobs_per_s, wall, None, None, "", "")

    def latency(
        self, workdir: Path, count: int, rate: float, workers: int, producer: str, timeout: float
    ) -> Measured:
        with throwaway_schema("durabl") as schema:
            queue = _open(schema)
            recorder = Recorder(count)

            def handler(job: Job[Any], ctx: JobContext) -> None:
                recorder.record(float(job.data["t"]), time.time())

            try:
                queue.process(NOOP, handler, concurrency=workers)
                with Processes(workdir) as procs:
                    proc = procs.start(
                        "producer",
                        python_c("durabl_pg_peer", "produce", schema, str(count), str(rate)),
                        child_env(),
                    )
                    procs.finish(proc, timeout)
                p50, p99 = latency_of(recorder.wait(timeout), count)
            finally:
                _close(queue)
        return Measured(None, None, p50, p99, "", "")
