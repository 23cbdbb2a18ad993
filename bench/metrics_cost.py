"""What ``durabl.metrics`` and ``durabl.tracing`` cost: no-op jobs on SQLite without and
with them.

Each round runs N no-op jobs through W worker threads on a fresh SQLite file once per
setup, in turn (so drift hits every setup alike): plain; with ``metrics.install(queue)``;
with metrics and ``tracing.instrument(queue)`` into an OpenTelemetry SDK provider that
records every span; the same with a parent-based 10 % ratio sampler; and metrics with
tracing instrumented but no SDK (OpenTelemetry's API alone, as when a library traces and
the app exports nothing). Spans go through a batch processor to an exporter that drops
them, so what is measured is what a worker pays, not an exporter's network. The jobs are
enqueued through the instrumented queue (each carries its trace context), outside the
timed part. Prints the median jobs/s of each setup and the median, over the rounds, of
its change from plain in the same round (a round's setups run back to back, so drift
between rounds cancels out). Run: ``.venv/bin/python bench/metrics_cost.py [--jobs N]
[--rounds R] [--workers W]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from durabl import JobQueue, SqliteJobQueue  # noqa: E402

SETUPS = ("plain", "metrics", "metrics+tracing", "metrics+tracing 10%", "metrics+tracing API")


def dropping_provider(ratio: float = 1.0) -> Any:
    """An SDK tracer provider that records ``ratio`` of the traces (parent-based) and
    whose batch processor hands every span to an exporter that drops it: what spans cost
    a worker, not an exporter's network."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider


def instrument(queue: JobQueue, setup: str) -> None:
    if setup == "plain":
        return
    from durabl import metrics

    metrics.install(queue, registry=metrics.new_registry())
    if not setup.startswith("metrics+tracing"):
        return
    from durabl import tracing

    if setup.endswith("API"):
        from opentelemetry.trace import NoOpTracerProvider

        tracing.instrument(queue, tracer_provider=NoOpTracerProvider())
        return
    ratio = 0.1 if setup.endswith("10%") else 1.0
    tracing.instrument(queue, tracer_provider=dropping_provider(ratio))


def one_run(jobs: int, workers: int, setup: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        queue = JobQueue(SqliteJobQueue(str(Path(tmp) / "jobs.db")))
        instrument(queue, setup)
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
        queue.process("noop", noop, concurrency=workers, poll_interval=0.05)
        done.wait(120)
        elapsed = time.monotonic() - started
        queue.shutdown(5)
        queue.backend.close()
        return jobs / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    for _ in range(args.rounds):
        for setup in SETUPS:
            runs[setup].append(one_run(args.jobs, args.workers, setup))
    print(
        f"no-op jobs on SQLite, {args.workers} threads, {args.jobs} jobs, "
        f"median of {args.rounds} rounds"
    )
    for setup in SETUPS:
        median = statistics.median(runs[setup])
        changes = [run / plain - 1 for run, plain in zip(runs[setup], runs["plain"], strict=True)]
        change = "" if setup == "plain" else f"  ({statistics.median(changes):+.1%})"
        print(f"  {setup:<22} {median:8.0f} jobs/s{change}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
