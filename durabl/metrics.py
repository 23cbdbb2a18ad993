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
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from durabl.model.job import STATUSES, Job
from durabl.model.options import NewJob
from durabl.model.reports import JobEvent, QueueStats

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from durabl.runtime.queue import JobQueue

#: Seconds the gauges reuse one reading of the store.
GAUGE_INTERVAL = 10.0
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
#: The event kinds the counters and the duration histogram are fed from (no other event
#: is built for them).
RECORDED_KINDS = (
    "completed",
    "failed",
    "fail-fatal",
    "lease-lost",
    "dead-lettered",
    "timed-out",
)
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


#: The counters: name, help, label names (``type`` first).
COUNTERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("durabl_jobs_enqueued_total", "Jobs enqueued", ("type",)),
    ("durabl_jobs_completed_total", "Jobs completed", ("type",)),
    ("durabl_jobs_failed_total", "Jobs failed for good", ("type", "failure_kind")),
    ("durabl_jobs_retried_total", "Failed runs with a retry scheduled", ("type",)),
    ("durabl_lease_lost_total", "Runs whose lease was lost", ("type",)),
    (
        "durabl_runs_timed_out_total",
        "Runs past their time limit; abandoned: the handler's thread was left behind",
        ("type", "abandoned"),
    ),
)
#: The histograms: name, help, buckets (labelled by ``type``).
HISTOGRAMS: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    ("durabl_job_duration_seconds", "Handler run time", DURATION_BUCKETS),
    (
        "durabl_job_pickup_delay_seconds",
        "From a job's run_at to the start of its run",
        DELAY_BUCKETS,
    ),
)
_ENQUEUED, _COMPLETED, _FAILED, _RETRIED, _LEASE_LOST, _TIMED_OUT = (
    name for name, _, _ in COUNTERS
)
_DURATION, _DELAY = (name for name, _, _ in HISTOGRAMS)


class _Histogram:
    """One histogram's observations for one type: a count per bucket (the last one past
    every bound, ``+Inf``), their sum, and when the first came."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...], created: float) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = created


class Tallies:
    """The counters and histograms of one queue, kept as plain numbers behind one lock
    and turned into Prometheus samples when scraped.

    prometheus_client's own ``Counter`` and ``Histogram`` take a lock per value and walk
    the buckets one method call at a time; a worker records two observations and a count
    on every run, so here a count is one dict update and an observation one ``bisect``
    and two additions, under a single uncontended lock."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._lock = threading.Lock()
        #: (counter name, *label values) -> count.
        self._counts: dict[tuple[str, ...], float] = {}
        #: (counter name, *label values) -> when the series was first counted.
        self._created: dict[tuple[str, ...], float] = {}
        self._histograms: dict[str, dict[str, _Histogram]] = {name: {} for name, *_ in HISTOGRAMS}
        self._bounds = {name: bounds for name, _, bounds in HISTOGRAMS}

    def count(self, key: tuple[str, ...]) -> None:
        """Add one to the counter series ``key`` (its name, then its label values)."""
        with self._lock:
            found = self._counts.get(key)
            if found is None:
                self._created[key] = self._wall()
                self._counts[key] = 1.0
            else:
                self._counts[key] = found + 1.0

    def observe(self, name: str, type: str, value: float) -> None:
        """Record ``value`` in histogram ``name`` of ``type``."""
        by_type = self._histograms[name]
        histogram = by_type.get(type)
        if histogram is None:
            with self._lock:
                histogram = by_type.get(type)
                if histogram is None:
                    histogram = by_type[type] = _Histogram(self._bounds[name], self._wall())
        index = bisect_left(histogram.bounds, value)  # a bucket holds values <= its bound
        with self._lock:
            histogram.counts[index] += 1
            histogram.sum += value

    def describe(self) -> Iterator[Any]:
        """The metric families, without samples (so a registry knows their names)."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        for name, help, labels in COUNTERS:
            yield CounterMetricFamily(name, help, labels=labels)
        for name, help, _ in HISTOGRAMS:
            yield HistogramMetricFamily(name, help, labels=["type"])

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        from prometheus_client.samples import Sample

        with self._lock:
            counts = dict(self._counts)
            created = dict(self._created)
            histograms = {
                name: {type: (list(h.counts), h.sum, h.created) for type, h in by_type.items()}
                for name, by_type in self._histograms.items()
            }
        for name, help, labels in COUNTERS:
            family = CounterMetricFamily(name, help, labels=labels)
            for key, value in counts.items():
                if key[0] == name:
                    family.add_metric(key[1:], value, created=created[key])
            yield family
        for name, help, bounds in HISTOGRAMS:
            histogram = HistogramMetricFamily(name, help, labels=["type"])
            edges = [repr(float(bound)) for bound in bounds] + ["+Inf"]
            for type, (bucket_counts, total, since) in histograms[name].items():
                cumulative, buckets = 0, []
                for edge, n in zip(edges, bucket_counts, strict=True):
                    cumulative += n
                    buckets.append((edge, float(cumulative)))
                histogram.add_metric([type], buckets, total)
                histogram.samples.append(Sample(f"{name}_created", {"type": type}, since))
            yield histogram


class QueueMetrics:
    """The metrics of one queue; ``uninstall()`` detaches them from it."""

    def __init__(
        self, queue: JobQueue, registry: CollectorRegistry | None, gauge_interval: float
    ) -> None:
        from prometheus_client import REGISTRY

        self.queue = queue
        self.registry = REGISTRY if registry is None else registry
        #: The counters and histograms (``durabl_jobs_*_total``, ``durabl_job_*_seconds``).
        self.tallies = Tallies()
        self.gauges = StoreGauges(queue, gauge_interval)
        self.registry.register(self.tallies)
        self.registry.register(self.gauges)
        self._now = queue.clock.now
        self._remove_sink = queue.add_event_sink(self.record, kinds=RECORDED_KINDS)
        self._remove_hook = queue.add_run_hook(self.run_hook)
        self._remove_enqueue_hook = queue.add_enqueue_hook(self.enqueue_hook)

    def enqueue_hook(self, job: NewJob, proceed: Callable[[NewJob], str | None]) -> str | None:
        job_id = proceed(job)
        if job_id is not None:  # None: a dedupe key already covered it
            self.tallies.count((_ENQUEUED, job.type))
        return job_id

    def run_hook(self, job: Job[Any], proceed: Callable[[], object]) -> object:
        delay = (self._now() - job.run_at).total_seconds()
        self.tallies.observe(_DELAY, job.type, delay if delay > 0.0 else 0.0)
        return proceed()

    def record(self, event: JobEvent) -> None:
        kind, type = event.kind, event.type or "unknown"
        tallies = self.tallies
        if kind == "completed":
            tallies.count((_COMPLETED, type))
        elif kind == "failed":
            if event.terminal:
                kind_of = str(event.extra.get("failure_kind", "retries-exhausted"))
                tallies.count((_FAILED, type, kind_of))
            else:
                tallies.count((_RETRIED, type))
        elif kind == "fail-fatal":
            tallies.count((_FAILED, type, "fatal"))
        elif kind == "lease-lost":
            tallies.count((_LEASE_LOST, type))
            return
        elif kind == "timed-out":
            abandoned = "true" if event.extra.get("abandoned") else "false"
            tallies.count((_TIMED_OUT, type, abandoned))
            return
        elif kind == "dead-lettered":
            failure_kind = str(event.extra.get("failure_kind", ""))
            if failure_kind not in ("retries-exhausted", "fatal", "timed-out"):  # counted above
                tallies.count((_FAILED, type, failure_kind or "unknown"))
            return
        else:
            return
        if event.duration is not None:
            tallies.observe(_DURATION, type, event.duration)

    def uninstall(self) -> None:
        """Stop feeding these metrics and unregister them from their registry."""
        self._remove_sink()
        self._remove_hook()
        self._remove_enqueue_hook()
        self.registry.unregister(self.tallies)
        self.registry.unregister(self.gauges)


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


class MetricsServer:
    """The HTTP server :func:`serve` started: the port it listens on (the one the OS chose
    for port 0) and :meth:`close`, which stops it and frees the port."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.port: int = server.server_address[1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(
    port: int, *, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``/metrics`` on ``addr:port`` (0: a free port, see ``.port``) from a daemon
    thread; ``close()`` the result to stop it."""
    from prometheus_client import REGISTRY, start_http_server

    server, thread = start_http_server(
        port, addr=addr, registry=REGISTRY if registry is None else registry
    )
    return MetricsServer(server, thread)
