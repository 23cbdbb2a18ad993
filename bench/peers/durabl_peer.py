"""durabl on a SQLite file: ``SqliteJobQueue(path)`` + ``JobQueue.process(...)``.

Only the public API: the workers are ``concurrency`` threads of this process, fed by one
poller per job type (``poll_interval`` when idle; an ``enqueue`` in the same process wakes
it at once, and the SQLite change check wakes it when another process commits).
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peers.common import (
    IN_PROCESS,
    NOOP,
    POLL_INTERVAL,
    Library,
    Measured,
    Processes,
    Recorder,
    Skip,
    child_env,
    file_journal_mode,
    latency_of,
    produce_paced,
    python_c,
    throughput_of,
    wait_until,
)

if TYPE_CHECKING:
    from durabl import Job, JobContext, JobQueue

SHUTDOWN_TIMEOUT = 10.0
DB_FILE = "durabl.db"


def _open(path: Path | str) -> JobQueue:
    try:
        from durabl import JobQueue, SqliteJobQueue
    except ImportError as exc:
        raise Skip(f"durabl's SQLite backend is not importable yet ({exc})") from exc
    queue = JobQueue(SqliteJobQueue(path))
    queue.startup()
    return queue


def _synchronous() -> str:
    """durabl's default, from ``SqliteJobQueue``'s signature (its connections run
    ``PRAGMA synchronous = <synchronous>``, durabl/stores/sqlite/connection.py)."""
    from durabl import SqliteJobQueue

    default = inspect.signature(SqliteJobQueue).parameters["synchronous"].default
    return str(default).upper()


def produce(path: str, count: str, rate: str) -> None:
    """The second-process producer (``python -c``): same file, its own queue."""
    queue = _open(path)
    try:
        produce_paced(int(count), float(rate), lambda t: queue.enqueue(NOOP, {"t": t}))
    finally:
        queue.shutdown(timeout=SHUTDOWN_TIMEOUT)


class Durabl(Library):
    name = "durabl"
    unit = "thread"
    polling = (
        f"poll_interval={POLL_INTERVAL:g}s: one poller per type claims for all its threads; "
        "an enqueue in the same process wakes it at once, another process's commit within "
        "change_check_interval (5 ms)"
    )

    def version(self) -> str:
        try:
            import durabl
            from durabl import SqliteJobQueue  # noqa: F401
        except ImportError as exc:
            raise Skip(f"durabl's SQLite backend is not importable yet ({exc})") from exc
        return str(durabl.__version__)

    def open(self, path: Path) -> JobQueue:
        return _open(path)

    def throughput(self, workdir: Path, jobs: int, workers: int, timeout: float) -> Measured:
        path = workdir / DB_FILE
        queue = self.open(path)
        try:
            for i in range(jobs):
                queue.enqueue(NOOP, {"i": i})
            recorder = Recorder(jobs)

            def handler(job: Job[Any], ctx: JobContext) -> None:
                recorder.record(0.0, time.time())

            began = time.time()
            queue.process(NOOP, handler, concurrency=workers, poll_interval=POLL_INTERVAL)
            jobs_per_s, wall = throughput_of(recorder.wait(timeout), jobs, began)
            # The last terminal writes land just after the last handler returns.
            wait_until(lambda: queue.get_stats(NOOP).completed >= jobs, 30.0, "all jobs completed")
        finally:
            queue.shutdown(timeout=SHUTDOWN_TIMEOUT)
        return Measured(jobs_per_s, wall, None, None, file_journal_mode(path), _synchronous())

    def latency(
        self, workdir: Path, count: int, rate: float, workers: int, producer: str, timeout: float
    ) -> Measured:
        path = workdir / DB_FILE
        queue = self.open(path)
        recorder = Recorder(count)

        def handler(job: Job[Any], ctx: JobContext) -> None:
            recorder.record(float(job.data["t"]), time.time())

        try:
            queue.process(NOOP, handler, concurrency=workers, poll_interval=POLL_INTERVAL)
            if producer == IN_PROCESS:
                produce_paced(count, rate, lambda t: queue.enqueue(NOOP, {"t": t}))
            else:
                with Processes(workdir) as procs:
                    proc = procs.start(
                        "producer",
                        python_c("durabl_peer", "produce", str(path), str(count), str(rate)),
                        child_env(),
                    )
                    procs.finish(proc, timeout)
            p50, p99 = latency_of(recorder.wait(timeout), count)
        finally:
            queue.shutdown(timeout=SHUTDOWN_TIMEOUT)
        return Measured(None, None, p50, p99, file_journal_mode(path), _synchronous())


class DurablObserved(Durabl):
    """durabl with ``durabl.metrics.install(queue)`` (a registry of its own) and, unless
    ``sampled`` is None, ``durabl.tracing.instrument(queue)`` into an SDK tracer provider
    that records that share of traces (a parent-based ratio sampler; 1.0: every span) and
    whose batch processor hands every span to an exporter that drops it: what they cost a
    worker, not an exporter's network."""

    def __init__(self, sampled: float | None = 1.0) -> None:
        self.sampled = sampled
        if sampled is None:
            self.name = "durabl +metrics"
        elif sampled == 1.0:
            self.name = "durabl +metrics+tracing"
        else:
            self.name = f"durabl +metrics+tracing {sampled:.0%}"

    def version(self) -> str:
        try:
            import opentelemetry.sdk.trace  # noqa: F401
            import prometheus_client  # noqa: F401
        except ImportError as exc:
            raise Skip(f"needs durabl[metrics,otel] and opentelemetry-sdk ({exc})") from exc
        return super().version()

    def open(self, path: Path) -> JobQueue:
        from collections.abc import Sequence

        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        from durabl import metrics, tracing

        class Dropped(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        queue = _open(path)
        metrics.install(queue, registry=metrics.new_registry())
        if self.sampled is None:
            return queue
        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(self.sampled)))
        provider.add_span_processor(BatchSpanProcessor(Dropped()))
        tracing.instrument(queue, tracer_provider=provider)
        return queue
