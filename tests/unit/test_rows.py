"""The SQL stores' row mapping (durabl.model.rows) fills every field of a Job."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from durabl.model.job import Job
from durabl.model.rows import job_from_row
from durabl.model.tagged_json import encode_payload


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "j1",
        "type": "email",
        "data": encode_payload({"to": "a@example.com"}),
        "status": "active",
        "priority": 3,
        "run_at": 1_700_000_000_000,
        "attempts": 1,
        "max_attempts": 5,
        "dedupe_key": "k",
        "dedupe_scope": "pending",
        "concurrency_key": "account:1",
        "concurrency_limit": 1,
        "created_at": 1_700_000_000_000,
        "updated_at": 1_700_000_001_000,
        "finished_at": None,
        "fail_reason": None,
        "failure_kind": None,
        "backoff": "fixed",
        "backoff_delay": 2,
        "backoff_max_delay": 60,
        "journal": None,
        "attempt_history": None,
        "lease_owner": "host:1",
        "heartbeat_at": 1_700_000_001_000,
        "result": None,
        "trace_context": None,
        "timeout": None,
        "parent_id": None,
        "parent_step": None,
    }
    row.update(overrides)
    return row


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def test_a_row_fills_every_job_field() -> None:
    job = job_from_row(_row(), instant=_instant, logs=())
    assert set(vars(job)) == {f.name for f in dataclasses.fields(Job)}
    assert job.data == {"to": "a@example.com"}
    assert job.run_at == _instant(1_700_000_000_000)
    assert job.backoff_delay == 2.0 and isinstance(job.backoff_delay, float)
    assert job.worker == "host:1"
    assert job.heartbeat_at == _instant(1_700_000_001_000)
    assert job.journal == () and job.attempt_history == () and job.result is None
    assert job.trace_context is None and job.finished_at is None and job.timeout is None
    finished = job_from_row(
        _row(status="completed", finished_at=1_700_000_002_000), instant=_instant, logs=()
    )
    assert finished.finished_at == _instant(1_700_000_002_000)


def test_a_stored_trace_context_reads_back_as_a_dict() -> None:
    job = job_from_row(
        _row(trace_context='{"traceparent":"00-ab-cd-01"}'), instant=_instant, logs=()
    )
    assert job.trace_context == {"traceparent": "00-ab-cd-01"}


def test_stored_journal_result_and_no_heartbeat_read_back() -> None:
    row = _row(
        status="completed",
        journal=encode_payload([{"step": "a"}]),
        result=encode_payload({"ok": True}),
        heartbeat_at=None,
        lease_owner=None,
    )
    job = job_from_row(row, instant=_instant, logs=())
    assert job.journal == ({"step": "a"},)
    assert job.result == {"ok": True}
    assert job.heartbeat_at is None and job.worker is None
