"""``durabl.metrics``: counters, histograms and gauges checked against a run."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from durabl import JobQueue, MemoryBackend, NonRetryable, metrics


def ok(job: Any, ctx: Any) -> None:
    return None


def flaky(job: Any, ctx: Any) -> None:
    raise ValueError("try again")


def fatal(job: Any, ctx: Any) -> None:
    raise NonRetryable("no")


@pytest.fixture
def measured() -> tuple[JobQueue, CollectorRegistry, metrics.QueueMetrics]:
    queue = JobQueue(MemoryBackend())
    registry = CollectorRegistry()
    installed = metrics.install(queue, registry=registry)
    return queue, registry, installed


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_counters_and_histograms_follow_a_run(
    measured: tuple[JobQueue, CollectorRegistry, metrics.QueueMetrics],
) -> None:
    queue, registry, _ = measured
    for _ in range(3):
        queue.enqueue("ok", {})
    queue.enqueue("flaky", {}, max_attempts=2)
    queue.enqueue("last", {}, max_attempts=1)
    queue.enqueue("fatal", {})
    queue.register("ok", ok)
    queue.register("flaky", flaky)
    queue.register("last", flaky)
    queue.register("fatal", fatal)
    for type in ("ok", "flaky", "last", "fatal"):
        queue.run_pending(type)
    assert value(registry, "durabl_jobs_enqueued_total", type="ok") == 3
    assert value(registry, "durabl_jobs_completed_total", type="ok") == 3
    assert value(registry, "durabl_job_duration_seconds_count", type="ok") == 3
    assert value(registry, "durabl_job_pickup_delay_seconds_count", type="ok") == 3
    assert value(registry, "durabl_jobs_retried_total", type="flaky") == 1
    assert value(registry, "durabl_jobs_failed_total", type="flaky", failure_kind="fatal") is None
    assert (
        value(registry, "durabl_jobs_failed_total", type="last", failure_kind="retries-exhausted")
        == 1
    )
    assert value(registry, "durabl_jobs_failed_total", type="fatal", failure_kind="fatal") == 1


def test_gauges_read_the_store_at_most_every_interval(
    measured: tuple[JobQueue, CollectorRegistry, metrics.QueueMetrics],
) -> None:
    queue, registry, installed = measured
    queue.enqueue("ok", {})
    queue.enqueue("ok", {})
    assert value(registry, "durabl_jobs", type="ok", status="pending") == 2
    queue.enqueue("ok", {})
    for _ in range(5):  # scraped again within 10 s: the same reading
        assert value(registry, "durabl_jobs", type="ok", status="pending") == 2
    assert installed.gauges.reads == 1
    lag = value(registry, "durabl_oldest_pending_lag_seconds", type="ok")
    assert lag is not None and lag >= 0


def test_gauge_interval_expiry_reads_again() -> None:
    queue = JobQueue(MemoryBackend())
    now = [0.0]
    gauges = metrics.StoreGauges(queue, interval=10, monotonic=lambda: now[0])
    queue.enqueue("t", {})
    assert gauges.stats()["t"].pending == 1
    queue.enqueue("t", {})
    now[0] = 9.9
    assert gauges.stats()["t"].pending == 1
    now[0] = 10.0
    assert gauges.stats()["t"].pending == 2 and gauges.reads == 2


def test_the_previous_sink_still_gets_every_event_and_uninstall_restores() -> None:
    seen: list[str] = []
    queue = JobQueue(MemoryBackend(), on_job_event=lambda event: seen.append(event.kind))
    registry = CollectorRegistry()
    installed = metrics.install(queue, registry=registry)
    queue.enqueue("ok", {})
    queue.register("ok", ok)
    queue.run_pending("ok")
    assert "completed" in seen
    installed.uninstall()
    assert value(registry, "durabl_jobs_completed_total", type="ok") is None
    queue.enqueue("ok", {})  # the plain enqueue again
    metrics.install(queue, registry=registry)  # a second install on the registry is fine


def test_serve_exposes_metrics_over_http() -> None:
    queue = JobQueue(MemoryBackend())
    registry = CollectorRegistry()
    metrics.install(queue, registry=registry)
    queue.enqueue("ok", {})
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.serve(port, addr="127.0.0.1", registry=registry)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    assert 'durabl_jobs_enqueued_total{type="ok"} 1.0' in body
