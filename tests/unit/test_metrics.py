"""``durabl.metrics``: counters, histograms and gauges checked against a run."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from durabl import JobQueue, MemoryBackend, NonRetryable, metrics
from durabl.testing import FakeClock


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


def test_timed_out_runs_count_once_as_failed_and_in_their_own_counter() -> None:
    clock = FakeClock()
    queue = JobQueue(MemoryBackend(clock=clock), clock=clock)
    registry = CollectorRegistry()
    metrics.install(queue, registry=registry)

    def slow(job: Any, ctx: Any) -> None:
        clock.advance(2)
        ctx.signal.raise_if_aborted()

    queue.enqueue("slow", {}, max_attempts=2, backoff="fixed", backoff_delay=0)
    queue.register("slow", slow, timeout=1)
    assert queue.run_pending("slow") == 2
    labels = {"type": "slow", "abandoned": "false"}
    assert value(registry, "durabl_runs_timed_out_total", **labels) == 2
    assert value(registry, "durabl_jobs_retried_total", type="slow") == 1
    kinds = ("timed-out", "retries-exhausted")
    counted = [
        value(registry, "durabl_jobs_failed_total", type="slow", failure_kind=k) for k in kinds
    ]
    assert counted == [1, None]  # once, under its own kind (not again as dead-lettered)


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
    server = metrics.serve(0, addr="127.0.0.1", registry=registry)  # 0: a free port
    url = f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = response.read().decode()
    assert 'durabl_jobs_enqueued_total{type="ok"} 1.0' in body
    server.close()
    with pytest.raises(OSError):  # closed: nothing listens on the port any more
        urllib.request.urlopen(url, timeout=5)


def test_histogram_buckets_match_prometheus_clients_own() -> None:
    """The tallies put each value in the bucket prometheus_client's Histogram would,
    bounds included (a bucket holds values up to and including its bound)."""
    from prometheus_client import Histogram

    values = [0.0, 0.005, 0.0050001, 0.01, 0.3, 1.0, 2.5, 59.99, 60.0, 899.0, 900.0, 5e4]
    values += [i / 997 for i in range(2000)]
    tallies = metrics.Tallies()
    for v in values:
        tallies.observe("durabl_job_duration_seconds", "t", v)
    ours = CollectorRegistry()
    ours.register(tallies)
    theirs = CollectorRegistry()
    oracle = Histogram(
        "durabl_job_duration_seconds",
        "Handler run time",
        ["type"],
        buckets=metrics.DURATION_BUCKETS,
        registry=theirs,
    ).labels("t")
    for v in values:
        oracle.observe(v)
    for bound in [*metrics.DURATION_BUCKETS, float("inf")]:
        le = "+Inf" if bound == float("inf") else repr(float(bound))
        name = "durabl_job_duration_seconds_bucket"
        assert value(ours, name, type="t", le=le) == value(theirs, name, type="t", le=le), le
    for suffix in ("_count", "_sum"):
        name = "durabl_job_duration_seconds" + suffix
        assert value(ours, name, type="t") == pytest.approx(value(theirs, name, type="t"))


def test_tallies_count_every_observation_from_many_threads_exactly_once() -> None:
    import threading

    tallies = metrics.Tallies()
    registry = CollectorRegistry()
    registry.register(tallies)
    threads, per_thread = 8, 5000
    start = threading.Barrier(threads + 1)

    def record(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            tallies.count(("durabl_jobs_completed_total", f"t{n % 2}"))
            tallies.observe("durabl_job_pickup_delay_seconds", f"t{n % 2}", (i % 7) * 0.3)
            if i % 500 == 0:  # scrapes in between never lose a count
                registry.collect()

    workers = [threading.Thread(target=record, args=(n,), name=f"rec-{n}") for n in range(threads)]
    for t in workers:
        t.start()
    start.wait()
    for t in workers:
        t.join()
    for type in ("t0", "t1"):
        assert value(registry, "durabl_jobs_completed_total", type=type) == 4 * per_thread
        assert value(registry, "durabl_job_pickup_delay_seconds_count", type=type) == 4 * per_thread
        # (i % 7) * 0.3 <= 0.25 only for i % 7 == 0: a seventh of them, rounded up
        expected = 4 * len([i for i in range(per_thread) if i % 7 == 0])
        assert (
            value(registry, "durabl_job_pickup_delay_seconds_bucket", type=type, le="0.25")
            == expected
        )


def test_counters_carry_created_series_like_prometheus_clients() -> None:
    registry = CollectorRegistry()
    queue = JobQueue(MemoryBackend())
    metrics.install(queue, registry=registry)
    queue.enqueue("ok", {})
    queue.register("ok", ok)
    queue.run_pending("ok")
    for name in (
        "durabl_jobs_enqueued_created",
        "durabl_jobs_completed_created",
        "durabl_job_duration_seconds_created",
        "durabl_job_pickup_delay_seconds_created",
    ):
        created = value(registry, name, type="ok")
        assert created is not None and created > 1.7e9, name


def test_metrics_take_only_the_events_they_count() -> None:
    queue = JobQueue(MemoryBackend())
    metrics.install(queue, registry=CollectorRegistry())
    assert queue.listens("completed") and queue.listens("dead-lettered")
    assert not queue.listens("claimed")  # no claimed event is built for the metrics
