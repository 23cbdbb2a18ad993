"""Event sinks by kind and ``durabl.metrics`` on every store: a sink of some kinds gets
those from every way a job runs (``run_pending``, ``claim_or_enqueue`` + ``run_claimed``,
a worker pool), and the metrics count a run and read their gauges from the store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from durabl import JobEvent, JobQueue, metrics
from durabl.stores.base import Backend
from durabl.testing import FakeClock


def ok(job: Any, ctx: Any) -> None:
    return None


def fails(job: Any, ctx: Any) -> None:
    raise ValueError("no")


@pytest.fixture
def q(backend: Backend, clock: FakeClock) -> Iterator[JobQueue]:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    yield queue
    queue.shutdown(timeout=5)


class Seen:
    """The events a sink got, as (kind, job id), with a wait for a count."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None]] = []
        self._cond = threading.Condition()

    def __call__(self, event: JobEvent) -> None:
        with self._cond:
            self.events.append((event.kind, event.job_id))
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = 30) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.events) >= n, timeout)


def test_a_sink_of_some_kinds_gets_only_those_whatever_runs_the_job(q: JobQueue) -> None:
    outcomes, every = Seen(), Seen()
    q.add_event_sink(outcomes, kinds={"completed", "failed"})
    q.add_event_sink(every)
    q.register("ok", ok)
    q.register("bad", fails)

    pending_ok = q.enqueue("ok", {})
    pending_bad = q.enqueue("bad", {}, max_attempts=1)
    assert q.run_pending("ok") == 1 and q.run_pending("bad") == 1

    handle = q.claim_or_enqueue("ok", {}, dedupe_key="inline", dedupe_scope="pending")
    assert handle is not None
    q.run_claimed(handle, ok)

    pooled = q.enqueue("pool", {})
    q.process("pool", ok, concurrency=1, poll_interval=0.01)
    assert outcomes.wait_for(4)

    assert sorted(outcomes.events) == sorted(
        [
            ("completed", pending_ok),
            ("failed", pending_bad),
            ("completed", handle.id),
            ("completed", pooled),
        ]
    )
    assert every.wait_for(13)  # the outcomes, their claims and starts, the dead letter
    claimed = sorted(job_id or "" for kind, job_id in every.events if kind == "claimed")
    assert claimed == sorted(x or "" for x in (pending_ok, pending_bad, handle.id, pooled))
    assert ("dead-lettered", pending_bad) in every.events


def test_metrics_count_a_run_and_read_their_gauges_from_the_store(q: JobQueue) -> None:
    registry = CollectorRegistry()
    metrics.install(q, registry=registry)
    q.register("ok", ok)
    q.register("bad", fails)
    for _ in range(2):
        q.enqueue("ok", {})
    q.enqueue("bad", {}, max_attempts=1)
    q.enqueue("ok", {}, delay=3600)  # not due: stays pending
    assert q.run_pending("ok") == 2 and q.run_pending("bad") == 1

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("durabl_jobs_enqueued_total", type="ok") == 3
    assert value("durabl_jobs_completed_total", type="ok") == 2
    assert value("durabl_jobs_failed_total", type="bad", failure_kind="retries-exhausted") == 1
    assert value("durabl_job_duration_seconds_count", type="ok") == 2
    assert value("durabl_job_pickup_delay_seconds_count", type="bad") == 1
    assert value("durabl_jobs", type="ok", status="completed") == 2
    assert value("durabl_jobs", type="ok", status="pending") == 1
    assert value("durabl_jobs", type="bad", status="failed") == 1
    assert value("durabl_oldest_pending_lag_seconds", type="ok") == 0  # nothing due waits
