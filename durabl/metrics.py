"""Prometheus metrics for a :class:`durabl.JobQueue` (the ``durabl[metrics]`` extra).

``install(queue)`` feeds the counters and histograms from what the queue already produces,
with no wrapper around any handler: the job events (docs/events.md) for outcomes and
durations, one run hook for the pickup delay, and one enqueue hook that counts stored
jobs. The gauges read ``queue.stats_by_type()`` when scraped, at most every
``gauge_interval`` seconds (10) however often Prometheus asks. ``serve(port)`` exposes
``/metrics`` over HTTP (``durabl worker --metrics-port``).

prometheus_client is imported only here, so ``import durabl`` stays light.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from durabl.model.job import STATUSES, Job, JobEvent, QueueStats
from durabl.model.options import NewJob

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from durabl.runtime.queue import JobQueue

#: Seconds the gauges reuse one reading of the store.
GAUGE_INTERVAL = 10.0
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
DELAY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class StoreGauges:
    """A collector for ``durabl_jobs{type,status}`` and
    ``durabl_oldest_pending_lag_seconds{type}``, reading the store at most every
    ``interval`` seconds (a failed reading is logged by the scrape and retried next time)."""

    def __init__(
        self,
        queue: JobQueue,
        interval: float = GAUGE_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue = queue
        self.interval = interval
        self.monotonic = monotonic
        self.reads = 0
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._stats: dict[str, QueueStats] = {}

    def stats(self) -> dict[str, QueueStats]:
        with self._lock:
            now = self.monotonic()
            if self._read_at is None or now - self._read_at >= self.interval:
                self._read_at = now
                self.reads += 1
                self._stats = self.queue.stats_by_type()  # one read, not one per type
            return self._stats

    def describe(self) -> Iterator[Any]:
        return iter(())  # read the store only when scraped, not at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        jobs = GaugeMetricFamily("durabl_jobs", "Jobs in the store", labels=["type", "status"])
        lag = GaugeMetricFamily(
            "durabl_oldest_pending_lag_seconds",
            "How long the oldest due pending job has waited",
            labels=["type"],
        )
        for type, stats in self.stats().items():
            for status in (*STATUSES, "cancelled"):
                if hasattr(stats, status):
                    jobs.add_metric([type, status], float(getattr(stats, status)))
            lag.add_metric([type], stats.oldest_pending_lag)
        yield jobs
        yield lag


class QueueMetrics:
    """The metrics of one queue; ``uninstall()`` detaches them from it."""

    def __init__(
        self, queue: JobQueue, registry: CollectorRegistry | None, gauge_interval: float
    ) -> None:
        from prometheus_client import REGISTRY, Counter, Histogram

        self.queue = queue
        self.registry = REGISTRY if registry is None else registry
        r = self.registry
        self.enqueued = Counter("durabl_jobs_enqueued_total", "Jobs enqueued", ["type"], registry=r)
        self.completed = Counter(
            "durabl_jobs_completed_total", "Jobs completed", ["type"], registry=r
        )
        self.failed = Counter(
            "durabl_jobs_failed_total",
            "Jobs failed for good",
            ["type", "failure_kind"],
            registry=r,
        )
        self.retried = Counter(
            "durabl_jobs_retried_total", "Failed runs with a retry scheduled", ["type"], registry=r
        )
        self.lease_lost = Counter(
            "durabl_lease_lost_total", "Runs whose lease was lost", ["type"], registry=r
        )
        self.duration = Histogram(
            "durabl_job_duration_seconds",
            "Handler run time",
            ["type"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.pickup_delay = Histogram(
            "durabl_job_pickup_delay_seconds",
            "From a job's run_at to the start of its run",
            ["type"],
            buckets=DELAY_BUCKETS,
            registry=r,
        )
        # Labelled children by label values: ``labels()`` takes a lock and builds a key on
        # every call, and the events arrive on the completer thread that writes outcomes.
        self._children: dict[tuple[Any, ...], Any] = {}
        self.gauges = StoreGauges(queue, gauge_interval)
        r.register(self.gauges)
        self._remove_sink = queue.add_event_sink(self.record)
        self._remove_hook = queue.add_run_hook(self.run_hook)
        self._remove_enqueue_hook = queue.add_enqueue_hook(self.enqueue_hook)

    def child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def enqueue_hook(self, job: NewJob, proceed: Callable[[NewJob], str | None]) -> str | None:
        job_id = proceed(job)
        if job_id is not None:  # None: a dedupe key already covered it
            self.child(self.enqueued, job.type).inc()
        return job_id

    def run_hook(self, job: Job[Any], proceed: Callable[[], object]) -> object:
        delay = self.queue.clock.now() - job.run_at
        self.child(self.pickup_delay, job.type).observe(max(delay.total_seconds(), 0.0))
        return proceed()

    def record(self, event: JobEvent) -> None:
        kind, type = event.kind, event.type or "unknown"
        if kind == "completed":
            self.child(self.completed, type).inc()
        elif kind == "failed":
            if event.terminal:
                self.child(self.failed, type, "retries-exhausted").inc()
            else:
                self.child(self.retried, type).inc()
        elif kind == "fail-fatal":
            self.child(self.failed, type, "fatal").inc()
        elif kind == "lease-lost":
            self.child(self.lease_lost, type).inc()
            return
        elif kind == "dead-lettered":
            failure_kind = str(event.extra.get("failure_kind", ""))
            if failure_kind not in ("retries-exhausted", "fatal"):  # counted above
                self.child(self.failed, type, failure_kind or "unknown").inc()
            return
        else:
            return
        if event.duration is not None:
            self.child(self.duration, type).observe(event.duration)

    def uninstall(self) -> None:
        """Stop feeding these metrics and unregister them from their registry."""
        self._remove_sink()
        self._remove_hook()
        self._remove_enqueue_hook()
        for collector in (
            self.enqueued,
            self.completed,
            self.failed,
            self.retried,
            self.lease_lost,
            self.duration,
            self.pickup_delay,
            self.gauges,
        ):
            self.registry.unregister(collector)


def install(
    queue: JobQueue,
    *,
    registry: CollectorRegistry | None = None,
    gauge_interval: float = GAUGE_INTERVAL,
) -> QueueMetrics:
    """Export ``queue``'s metrics to ``registry`` (prometheus_client's default one)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ImportError(
            "durabl.metrics needs prometheus_client: pip install 'durabl[metrics]'"
        ) from None
    return QueueMetrics(queue, registry, gauge_interval)


def new_registry() -> CollectorRegistry:
    """A registry of its own (for one queue's metrics beside an app's default registry)."""
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


def serve(port: int, *, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None) -> None:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread."""
    from prometheus_client import REGISTRY, start_http_server

    start_http_server(port, addr=addr, registry=REGISTRY if registry is None else registry)
