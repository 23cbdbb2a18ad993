"""Orchestrator's public surface: define as a decorator and as a call, declaring without
starting, start(), definitions, and handlers used directly with queue.process."""

from __future__ import annotations

from typing import Any

import pytest

import durabl
from durabl import DummyBackend, ImmediateBackend, Job, JobQueue, MemoryBackend, Orchestrator
from durabl.orchestrator import (
    OrchestrationContext,
    OrchestrationDefinition,
    OrchestrationHandler,
)
from durabl.testing import FakeClock, OrchestrationHarness


def body(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.step("only", lambda keys, signal: job.data.get("n"))


def test_orchestrator_and_its_errors_are_exported_from_durabl() -> None:
    for name in ("Orchestrator", "NonRetryable", "NondeterminismError", "JournalTooLarge"):
        assert name in durabl.__all__
    assert issubclass(durabl.NondeterminismError, durabl.DurablError)
    assert issubclass(durabl.NonRetryable, durabl.FatalJobError)
    assert durabl.testing.OrchestrationHarness is OrchestrationHarness  # type: ignore[attr-defined]


def test_define_as_a_decorator_returns_the_body_for_the_harness() -> None:
    orch = Orchestrator(JobQueue(DummyBackend()))

    @orch.define("decorated", start=False, concurrency=3)
    def decorated(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("s", lambda keys, signal: 1)

    assert decorated.__name__ == "decorated"
    assert OrchestrationHarness(decorated).run() == "completed"
    definition = orch.definitions["decorated"]
    assert isinstance(definition, OrchestrationDefinition)
    assert (definition.type, definition.body) == ("decorated", decorated)
    assert definition.process_options == {"concurrency": 3}
    assert isinstance(definition.handler, OrchestrationHandler)
    assert definition.handler.__qualname__ == decorated.__qualname__


def test_define_without_starting_touches_neither_queue_nor_store() -> None:
    backend = DummyBackend()
    queue = JobQueue(backend)
    orch = Orchestrator(queue)
    assert orch.define("declared", body, start=False) is body
    assert backend.calls == []
    assert queue.processors == {}
    assert orch.started == frozenset()


def test_start_processes_every_declared_type_once() -> None:
    queue = JobQueue(MemoryBackend())
    try:
        orch = Orchestrator(queue)
        orch.define("a", body, start=False, poll_interval=60)
        orch.define("b", body, start=False, poll_interval=60)
        assert orch.start("a") == ["a"]
        assert orch.start() == ["b"]
        assert orch.start() == []
        assert set(queue.processors) == {"a", "b"}
        assert queue.processors["a"].handler is orch.definitions["a"].handler
        with pytest.raises(ValueError, match="no orchestration defined"):
            orch.start("c")
    finally:
        queue.shutdown(timeout=2)


def test_define_refuses_a_duplicate_type_and_unknown_options() -> None:
    orch = Orchestrator(JobQueue(DummyBackend()))
    orch.define("t", body, start=False)
    with pytest.raises(ValueError, match="already defined"):
        orch.define("t", body, start=False)
    with pytest.raises(TypeError, match="unexpected options"):
        orch.define("u", body, start=False, max_attempts=3)
    with pytest.raises(ValueError, match="job type"):
        orch.define("", body, start=False)
    with pytest.raises(TypeError, match="callable"):
        orch.define("v", "not a function", start=False)  # type: ignore[call-overload]


def test_orchestrator_options_are_validated() -> None:
    queue = JobQueue(DummyBackend())
    with pytest.raises(ValueError, match="max_journal_bytes"):
        Orchestrator(queue, max_journal_bytes=0)
    with pytest.raises(ValueError, match="step_timeout"):
        Orchestrator(queue, step_timeout=0)
    with pytest.raises(ValueError, match="max_duration"):
        Orchestrator(queue).define("t", body, start=False, max_duration=-1)


def test_a_handler_runs_with_queue_process_directly(clock: FakeClock) -> None:
    queue = JobQueue(MemoryBackend(clock=clock), clock=clock)
    queue.register("direct", OrchestrationHandler(body))
    job_id = queue.enqueue("direct", {"n": 7}) or ""
    queue.run_pending()
    job = queue.get_job(job_id)
    assert job is not None and job.status == "completed"
    assert job.journal[-1]["result"] == 7


def test_a_handler_is_not_a_plain_function() -> None:
    with pytest.raises(TypeError, match="only under a managed run"):
        OrchestrationHandler(body)(None, None)  # type: ignore[arg-type]


def test_a_handler_on_a_store_without_a_journal_fails_the_job_fatally(clock: FakeClock) -> None:
    class NoJournal(MemoryBackend):
        supports_journal = False

    queue = JobQueue(NoJournal(clock=clock), clock=clock)
    queue.register("t", OrchestrationHandler(body))
    job_id = queue.enqueue("t", {}, max_attempts=5) or ""
    queue.run_pending()
    job = queue.get_job(job_id)
    assert job is not None and job.failure_kind == "fatal"
    assert "cannot hold an orchestration journal" in (job.fail_reason or "")


def test_immediate_backend_runs_an_orchestration_inside_enqueue(clock: FakeClock) -> None:
    queue = JobQueue(ImmediateBackend(clock=clock), clock=clock)
    orch = Orchestrator(queue)
    ran: list[str] = []

    @orch.define("drip")
    def drip(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("first", lambda keys, signal: ran.append("first"))
        octx.sleep("later", 60)
        octx.step("second", lambda keys, signal: ran.append("second"))

    job_id = queue.enqueue("drip", {}) or ""
    assert ran == ["first"]
    job = queue.get_job(job_id)
    assert job is not None and job.status == "pending"
    clock.advance(60)
    queue.run_pending()
    assert ran == ["first", "second"]
