"""Rows the same in every SQL dialect but for the representation of instants (the
dialect's ``instant`` reads one back): a new job's parameters, and the admin overview's
wait candidates."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from durabl.model.activity import WaitCandidate
from durabl.model.options import NewJob
from durabl.model.rows import Row, decode_attempts, encode_trace_context
from durabl.model.tagged_json import encode_payload


def new_job_params(job: NewJob, run_at: Any) -> dict[str, Any]:
    """The columns of a new job that come from the request (``run_at`` in the dialect's
    representation); its payload encoded here, outside any transaction. A key takes the
    live slot under scope ``pending+active`` and the pending slot under ``pending``."""
    key, scope = job.dedupe_key, job.scope_for_store
    return {
        "id": uuid.uuid4().hex,
        "type": job.type,
        "data": encode_payload(job.data),
        "priority": job.priority,
        "run_at": run_at,
        "max_attempts": job.max_attempts,
        "dedupe_key": key,
        "dedupe_scope": scope,
        "live_slot": key if scope == "pending+active" else None,
        "pending_slot": key if scope == "pending" else None,
        "backoff": job.backoff.kind,
        "backoff_delay": float(job.backoff.delay),
        "backoff_max_delay": float(job.backoff.max_delay),
        "concurrency_key": job.concurrency_key,
        "concurrency_limit": job.concurrency_limit,
        "trace_context": encode_trace_context(job.trace_context),
        "timeout": job.timeout,
        "parent_id": job.parent_id,
        "parent_step": job.parent_step,
    }


def wait_candidate(row: Row, instant: Callable[[Any], datetime]) -> WaitCandidate:
    """A job as a candidate for the overview's lag line (see
    :meth:`durabl.stores.base.Backend.read_activity`): its instants and its starts."""
    beat = row["heartbeat_at"]
    attempts = decode_attempts(row["attempt_history"])
    return WaitCandidate(
        type=row["type"],
        status=row["status"],
        run_at=instant(row["run_at"]),
        created_at=instant(row["created_at"]),
        updated_at=instant(row["updated_at"]),
        heartbeat_at=None if beat is None else instant(beat),
        starts=tuple(a.started_at for a in attempts if a.started_at is not None),
    )
