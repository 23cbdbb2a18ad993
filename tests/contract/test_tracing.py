"""Trace contexts and tracing on every store: a job's ``trace_context`` is stored at
enqueue and read back by every claim and read; ``durabl.tracing.instrument`` makes a
PRODUCER span at enqueue and a CONSUMER span per run parented to it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from durabl import JobQueue, NewJob, tracing
from durabl.model.options import build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, get

CONTEXT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def test_a_stored_trace_context_reads_back_from_claims_and_reads(backend: Backend) -> None:
    new = dataclasses.replace(build_new_job("t", {}), trace_context=CONTEXT)
    job_id = backend.enqueue(new).job_id
    assert job_id is not None
    assert get(backend, job_id).trace_context == CONTEXT
    handle = claim_one(backend)
    assert handle.trace_context == CONTEXT and handle.as_job().trace_context == CONTEXT
    handle.fail("again", retry_at=backend.now())
    assert get(backend, job_id).trace_context == CONTEXT  # kept across attempts


def test_a_job_enqueued_without_one_has_none(backend: Backend) -> None:
    job_id = backend.enqueue(build_new_job("t", {})).job_id
    assert job_id is not None
    assert get(backend, job_id).trace_context is None
    assert claim_one(backend).trace_context is None


def test_an_inline_claim_keeps_its_trace_context(backend: Backend) -> None:
    new = dataclasses.replace(build_new_job("t", {}), trace_context=CONTEXT)
    handle = backend.claim_or_enqueue(new, "inline").handle
    assert handle is not None
    assert handle.trace_context == CONTEXT
    assert get(backend, handle.id).trace_context == CONTEXT


def test_an_enqueue_hook_changes_what_is_stored_and_a_run_hook_sees_it(
    backend: Backend, clock: FakeClock
) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    seen: list[Any] = []

    def stamp(job: NewJob, proceed: Any) -> str | None:
        return proceed(dataclasses.replace(job, trace_context={"k": job.type}))  # type: ignore[no-any-return]

    def look(job: Any, proceed: Any) -> object:
        seen.append(job.trace_context)
        return proceed()

    queue.add_enqueue_hook(stamp)
    queue.add_run_hook(look)
    job_id = queue.enqueue("t", {})
    assert job_id is not None and get(backend, job_id).trace_context == {"k": "t"}
    queue.register("t", lambda job, ctx: None)
    assert queue.run_pending("t") == 1
    assert seen == [{"k": "t"}]


@dataclasses.dataclass
class Spans:
    """An SDK tracer provider exporting to memory."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.finished()]
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Spans(provider, exporter)
    provider.shutdown()


@pytest.fixture
def traced(backend: Backend, clock: FakeClock, spans: Spans) -> Iterator[JobQueue]:
    """A queue over ``backend`` traced into ``spans`` (undone after the test)."""
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    instrumented = tracing.instrument(queue, tracer_provider=spans.provider)
    yield queue
    instrumented.uninstrument()


def test_a_run_is_a_consumer_span_parented_to_its_enqueue(
    backend: Backend, traced: JobQueue, spans: Spans
) -> None:
    job_id = traced.enqueue("email", {"to": "a"})
    assert job_id is not None
    traced.register("email", lambda job, ctx: None)
    assert traced.run_pending("email") == 1
    publish, process = spans.one("email publish"), spans.one("email process")
    assert publish.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert publish.context is not None and process.parent is not None
    assert process.parent.span_id == publish.context.span_id
    assert process.context is not None
    assert process.context.trace_id == publish.context.trace_id
    for span in (publish, process):
        attrs = span.attributes or {}
        assert attrs["messaging.system"] == "durabl"
        assert attrs["messaging.destination.name"] == "email"
        assert attrs["messaging.message.id"] == job_id
    assert (process.attributes or {})["durabl.attempt"] == 1
    stored = get(backend, job_id).trace_context
    assert stored is not None and f"{publish.context.trace_id:032x}" in stored["traceparent"]


def test_a_failing_run_records_its_exception(traced: JobQueue, spans: Spans) -> None:
    def broken(job: Any, ctx: Any) -> None:
        raise ValueError("no such user")

    traced.enqueue("email", {}, max_attempts=1)
    traced.register("email", broken)
    traced.run_pending("email")
    process = spans.one("email process")
    assert process.status.status_code is StatusCode.ERROR
    assert [e.name for e in process.events] == ["exception"]
    assert (process.events[0].attributes or {})["exception.message"] == "no such user"


def test_a_deduplicated_enqueue_is_marked_and_stores_nothing_new(
    traced: JobQueue, spans: Spans
) -> None:
    first = traced.enqueue("email", {}, dedupe_key="welcome:1")
    assert traced.enqueue("email", {}, dedupe_key="welcome:1") is None
    publishes = spans.named("email publish")
    assert [(s.attributes or {}).get("messaging.message.id") for s in publishes] == [first, None]
    assert (publishes[1].attributes or {})["durabl.deduplicated"] is True
    assert traced.count_jobs(type="email") == 1


def test_an_inline_follower_is_published_with_its_id(traced: JobQueue, spans: Spans) -> None:
    first = traced.claim_or_enqueue("email", {}, dedupe_key="k", dedupe_scope="pending")
    assert first is not None
    assert traced.claim_or_enqueue("email", {}, dedupe_key="k", dedupe_scope="pending") is None
    (follower,) = traced.list_jobs(status="pending")
    ids = [(s.attributes or {}).get("messaging.message.id") for s in spans.named("email publish")]
    assert ids == [first.id, follower.id]


def test_after_uninstrument_no_span_is_made_and_no_context_stored(
    backend: Backend, clock: FakeClock, spans: Spans
) -> None:
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    tracing.instrument(queue, tracer_provider=spans.provider).uninstrument()
    job_id = queue.enqueue("email", {})
    assert job_id is not None and get(backend, job_id).trace_context is None
    assert spans.finished() == ()
