"""``DURABL["TRACING"]``: True traces every queue of the process, False undoes it, a
wrong type is E002 and a missing opentelemetry-api is E012."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core import checks
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import durabl_django
from durabl import tracing
from durabl_django import runtime


def durabl_check_ids() -> list[str]:
    return [
        m.id or "" for m in checks.run_checks(tags=["durabl"]) if (m.id or "").startswith("durabl.")
    ]


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    # the global provider may be set once per process: read through a stand-in instead
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield spans
    provider.shutdown()
    tracing.uninstrument()


def test_tracing_true_traces_enqueue_and_run(exporter: InMemorySpanExporter) -> None:
    with override_settings(DURABL={"BACKEND": "durabl.MemoryBackend", "TRACING": True}):
        assert tracing.is_instrumented()
        queue = durabl_django.get_queue()
        job_id = queue.enqueue("mail", {})
        queue.register("mail", lambda job, ctx: None)
        assert queue.run_pending("mail") == 1
        names = sorted(s.name for s in exporter.get_finished_spans())
        assert names == ["mail process", "mail publish"]
        job = queue.get_job(job_id or "")
        assert job is not None and job.trace_context is not None
    assert not tracing.is_instrumented()  # the settings went back to TRACING False


def test_tracing_is_off_by_default() -> None:
    with override_settings(DURABL={"BACKEND": "durabl.MemoryBackend"}):
        assert not tracing.is_instrumented()


def test_a_wrong_type_is_e002() -> None:
    with override_settings(DURABL={"BACKEND": "durabl.MemoryBackend", "TRACING": "yes"}):
        assert "durabl.E002" in durabl_check_ids()
        assert not tracing.is_instrumented()


def test_without_opentelemetry_tracing_true_is_e012(monkeypatch: pytest.MonkeyPatch) -> None:
    from durabl_django import checks as durabl_checks

    monkeypatch.setattr(durabl_checks, "tracing_available", lambda: False)
    monkeypatch.setattr(runtime, "tracing_available", lambda: False)
    with override_settings(DURABL={"BACKEND": "durabl.MemoryBackend", "TRACING": True}):
        assert "durabl.E012" in durabl_check_ids()
        assert not tracing.is_instrumented()
