"""Declared job types on every store: per-type enqueue defaults, payload schemas (invalid
data refused with nothing written, the handler given the parsed value, stored data that no
longer validates failed ``invalid-payload``), and dead letters (the hook once per terminal
failure, the sink's ``dead-lettered`` event)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict

import durabl
from durabl import FatalJobError, Job, JobContext, JobEvent, JobQueue, PayloadValidationError
from durabl.runtime.declared import registry
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, enqueue_id, expire_leases, get


class Order(pydantic.BaseModel):
    sku: str
    qty: int
    placed_at: datetime | None = None


@dataclass
class Ping:
    host: str
    port: int = 80


class Mail(TypedDict):
    to: str


@pytest.fixture
def declared() -> Iterator[list[str]]:
    """Types declared by a test, forgotten afterwards (the registry is process-wide)."""
    names: list[str] = []
    yield names
    for name in names:
        registry.remove(name)


def declare(names: list[str], type: str, handler: Any = None, **options: Any) -> Any:
    names.append(type)
    return durabl.job(type, **options)(handler or (lambda job, ctx: None))


# -- per-type enqueue defaults ---------------------------------------------------------------
def test_declared_defaults_apply_to_every_enqueue_of_the_type(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "decl-defaults", max_attempts=5, priority=7, backoff="fixed", backoff_delay=2)
    job = queue.get_job(queue.enqueue("decl-defaults", {}) or "")
    assert job is not None
    assert (job.max_attempts, job.priority) == (5, 7)
    other = queue.get_job(queue.enqueue("undeclared", {}) or "")
    assert other is not None and (other.max_attempts, other.priority) == (3, 0)


def test_an_enqueue_option_given_overrides_the_declared_default(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "decl-override", max_attempts=5, priority=7)
    job = queue.get_job(queue.enqueue("decl-override", {}, max_attempts=2, priority=0) or "")
    assert job is not None and (job.max_attempts, job.priority) == (2, 0)


def test_claim_or_enqueue_applies_the_declared_defaults(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "decl-inline", max_attempts=4)
    handle = queue.claim_or_enqueue("decl-inline", {}, dedupe_key="k")
    assert handle is not None and handle.max_attempts == 4
    handle.complete()


def test_process_options_are_defaults_for_that_queue(queue: JobQueue) -> None:
    queue.register("proc-defaults", lambda job, ctx: None)
    queue.process("proc-other", lambda job, ctx: None, max_attempts=6, concurrency=1)
    job = queue.get_job(queue.enqueue("proc-other", {}) or "")
    assert job is not None and job.max_attempts == 6
    job = queue.get_job(queue.enqueue("proc-defaults", {}) or "")
    assert job is not None and job.max_attempts == 3


# -- payload schemas -------------------------------------------------------------------------
def test_invalid_data_raises_listing_every_issue_and_writes_nothing(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "decl-order", schema=Order)
    with pytest.raises(PayloadValidationError) as caught:
        queue.enqueue("decl-order", {"sku": 12, "qty": "many"})
    assert isinstance(caught.value, ValueError)
    assert [(issue.location, bool(issue.message)) for issue in caught.value.errors] == [
        ("sku", True),
        ("qty", True),
    ]
    assert "sku" in str(caught.value) and "qty" in str(caught.value)
    assert queue.count_jobs() == 0


def test_a_model_instance_is_stored_as_its_json_mode_dump(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "decl-dump", schema=Order)
    placed = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    job_id = queue.enqueue("decl-dump", Order(sku="a-1", qty=2, placed_at=placed))
    job = queue.get_job(job_id or "")
    assert job is not None
    assert job.data == {"sku": "a-1", "qty": 2, "placed_at": "2026-01-02T03:04:05Z"}


@pytest.mark.parametrize(
    ("schema", "data", "parsed"),
    [
        (Order, {"sku": "a", "qty": 1}, Order(sku="a", qty=1)),
        (Ping, {"host": "db"}, Ping("db", 80)),
        (Mail, {"to": "u@example.com"}, {"to": "u@example.com"}),
        (list[int], [1, 2], [1, 2]),
    ],
)
def test_the_handler_gets_the_parsed_value(
    queue: JobQueue, declared: list[str], schema: Any, data: Any, parsed: Any
) -> None:
    seen: list[Any] = []
    handler = declare(declared, "decl-parse", lambda job, ctx: seen.append(job.data), schema=schema)
    queue.register("decl-parse", handler)
    queue.enqueue("decl-parse", data)
    assert queue.run_pending() == 1
    assert seen == [parsed]


def test_stored_data_that_no_longer_validates_fails_invalid_payload_without_the_handler(
    backend: Backend, queue: JobQueue, declared: list[str]
) -> None:
    # Written before the schema existed (or by a process that does not know it).
    job_id = enqueue_id(backend, "decl-stale", {"sku": "a"}, max_attempts=3)
    called: list[Job[Any]] = []
    letters: list[Job[Any]] = []
    events: list[JobEvent] = []
    queue.on_job_event = events.append
    declare(declared, "decl-stale", schema=Order, on_dead_letter=letters.append)
    queue.register("decl-stale", lambda job, ctx: called.append(job))
    assert queue.run_pending() == 1
    assert called == []
    job = get(backend, job_id)
    assert (job.status, job.failure_kind, job.attempts) == ("failed", "invalid-payload", 1)
    assert job.fail_reason is not None and "qty" in job.fail_reason
    assert queue.get_stats().failed_by_kind == {"invalid-payload": 1}
    assert [j.id for j in queue.list_failed(failure_kind="invalid-payload")] == [job_id]
    assert [(j.id, j.failure_kind) for j in letters] == [(job_id, "invalid-payload")]
    dead = [e for e in events if e.kind == "dead-lettered"]
    assert [(e.job_id, e.extra["failure_kind"]) for e in dead] == [(job_id, "invalid-payload")]


# -- dead letters ----------------------------------------------------------------------------
def test_dead_letter_runs_once_when_retries_are_exhausted(
    queue: JobQueue, clock: FakeClock, declared: list[str]
) -> None:
    letters: list[Job[Any]] = []

    def boom(job: Job[Any], ctx: JobContext) -> None:
        raise RuntimeError("card declined")

    handler = declare(
        declared, "decl-retry", boom, max_attempts=2, backoff="fixed", on_dead_letter=letters.append
    )
    queue.register("decl-retry", handler)
    job_id = queue.enqueue("decl-retry", {})
    assert queue.run_pending() == 1
    assert letters == []  # a retry is no dead letter
    clock.advance(5)
    assert queue.run_pending() == 1
    clock.advance(5)
    assert queue.run_pending() == 0
    assert [(j.id, j.status, j.failure_kind) for j in letters] == [
        (job_id, "failed", "retries-exhausted")
    ]
    assert letters[0].fail_reason is not None and "card declined" in letters[0].fail_reason


def test_dead_letter_runs_for_a_fatal_failure_and_a_failing_hook_is_only_logged(
    queue: JobQueue, declared: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def hook(job: Job[Any]) -> None:
        calls.append(job.id)
        raise ValueError("alerting is down")

    def fatal(job: Job[Any], ctx: JobContext) -> None:
        raise FatalJobError("no such customer")

    queue.register("decl-fatal", fatal, on_dead_letter=hook)
    job_id = queue.enqueue("decl-fatal", {}, max_attempts=5)
    with caplog.at_level(logging.ERROR, logger="durabl"):
        assert queue.run_pending() == 1
    assert calls == [job_id]
    job = queue.get_job(job_id or "")
    assert job is not None and (job.status, job.failure_kind) == ("failed", "fatal")
    assert "alerting is down" in caplog.text


def test_no_dead_letter_for_a_completed_job(queue: JobQueue) -> None:
    letters: list[Job[Any]] = []
    queue.register("decl-ok", lambda job, ctx: None, on_dead_letter=letters.append)
    queue.enqueue("decl-ok", {})
    assert queue.run_pending() == 1
    assert letters == []


def test_a_stall_recorded_by_this_process_reaper_dead_letters_once(
    backend: Backend, queue: JobQueue, clock: FakeClock
) -> None:
    letters: list[Job[Any]] = []
    events: list[JobEvent] = []
    queue.on_job_event = events.append
    queue.register("decl-stall", lambda job, ctx: None, on_dead_letter=letters.append)
    job_id = enqueue_id(backend, "decl-stall", max_attempts=1)
    backend.claim("decl-stall", limit=1, lease_owner="a-worker-that-dies")
    expire_leases(clock, backend, VT)
    assert queue.reap_once(VT).stalled == 1
    assert queue.reap_once(VT).stalled == 0
    assert [(j.id, j.failure_kind) for j in letters] == [(job_id, "stalled")]
    assert [e.job_id for e in events if e.kind == "dead-lettered"] == [job_id]
