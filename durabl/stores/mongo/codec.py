"""Documents <-> durabl data types, and the document-size budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import bson
from bson import ObjectId
from bson.codec_options import CodecOptions

from durabl.model.attempts import attempt_from_record
from durabl.model.clock import as_utc
from durabl.model.exceptions import DocumentTooLargeError
from durabl.model.job import Job, LogEntry, clip_text
from durabl.model.options import (
    MAX_JOB_DOCUMENT,
    MAX_LOG_ENTRIES,
    MAX_LOG_MESSAGE_BYTES,
    RECEIPTS_KEPT,
    NewJob,
)

_CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True)

# Dedupe slot fields: each has a unique partial index; a slot is set only while the job
# holds it. pending+active uses one live slot; pending uses a pending and an active slot.
LIVE_SLOT = "live_slot"
PENDING_SLOT = "pending_slot"
ACTIVE_SLOT = "active_slot"
SLOTS = (LIVE_SLOT, PENDING_SLOT, ACTIVE_SLOT)
#: The concurrency-key slot an active job holds (see :mod:`durabl.stores.mongo.flow`). A
#: job leaving ``active`` drops it, so the change stream sees a slot freed on that job's
#: key (it is in the update's ``removedFields``), and only for a job with a key.
CONCURRENCY_SLOT = "concurrency_slot"
LEASE_FIELDS = (
    "claim_token",
    "heartbeat_at",
    "claimed_at",
    "lease_owner",
    "reserved",
    "cancel_requested",
)
"""Fields that hold only while a job is active (``reserved``: see :mod:`durabl.model.rules`)."""


def pending_slot(scope: str) -> str:
    return LIVE_SLOT if scope == "pending+active" else PENDING_SLOT


def other_scope_slots(scope: str) -> tuple[str, ...]:
    return (PENDING_SLOT, ACTIVE_SLOT) if scope == "pending+active" else (LIVE_SLOT,)


def fence(job_id: ObjectId, token: str) -> dict[str, Any]:
    """The filter of every write after a claim: it matches only the claim ``token`` holds."""
    return {"_id": job_id, "claim_token": token, "status": "active"}


def parse_id(job_id: str) -> ObjectId | None:
    try:
        return ObjectId(job_id)
    except (bson.errors.InvalidId, TypeError):
        return None


def new_document(job: NewJob, now: datetime) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": ObjectId(),
        "type": job.type,
        "data": job.data,
        "status": "pending",
        "priority": job.priority,
        "run_at": job.run_at or now,
        "attempts": 0,
        "max_attempts": job.max_attempts,
        "created_at": now,
        "updated_at": now,
        "backoff": {
            "kind": job.backoff.kind,
            "delay": job.backoff.delay,
            "max_delay": job.backoff.max_delay,
        },
    }
    if job.dedupe_key is not None:
        doc["dedupe_key"] = job.dedupe_key
        doc["dedupe_scope"] = job.dedupe_scope
        doc[pending_slot(job.dedupe_scope)] = job.dedupe_key
    if job.concurrency_key is not None:  # flow control: see durabl.stores.mongo.flow
        doc["concurrency_key"] = job.concurrency_key
        doc["concurrency_limit"] = job.concurrency_limit
    if job.trace_context is not None:
        doc["trace_context"] = dict(job.trace_context)
    if job.timeout is not None:
        doc["timeout"] = job.timeout
    if job.parent_id is not None:  # a child job (octx.start_children)
        doc["parent_id"] = job.parent_id
        doc["parent_step"] = job.parent_step
    return doc


def round_trip(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` as the server would return it: a fresh copy, BSON types and precision."""
    return bson.decode(bson.encode(doc), codec_options=_CODEC)


def check_document_size(job_type: str, doc: Mapping[str, Any]) -> None:
    size = len(bson.encode(doc))
    if size > MAX_JOB_DOCUMENT:
        raise DocumentTooLargeError(
            f"job of type {job_type!r} is {size} bytes; a job document may hold at most "
            f"{MAX_JOB_DOCUMENT} bytes (MongoDB's 16 MB limit less room for logs and the "
            "failure reason). Store large data elsewhere and enqueue a reference to it."
        )


def log_documents(logs: Sequence[LogEntry]) -> list[dict[str, Any]]:
    return [{"at": e.at, "msg": clip_text(e.message, MAX_LOG_MESSAGE_BYTES)} for e in logs]


def to_job(doc: Mapping[str, Any]) -> Job[Any]:
    backoff = doc.get("backoff") or {}
    return Job(
        id=str(doc["_id"]),
        type=doc["type"],
        data=doc.get("data"),
        status=doc["status"],
        priority=doc.get("priority", 0),
        run_at=as_utc(doc["run_at"]),
        attempts=doc.get("attempts", 0),
        max_attempts=doc.get("max_attempts", 1),
        dedupe_key=doc.get("dedupe_key"),
        dedupe_scope=doc.get("dedupe_scope"),
        concurrency_key=doc.get("concurrency_key"),
        concurrency_limit=doc.get("concurrency_limit"),
        created_at=as_utc(doc["created_at"]),
        updated_at=as_utc(doc["updated_at"]),
        finished_at=None if doc.get("finished_at") is None else as_utc(doc["finished_at"]),
        fail_reason=doc.get("fail_reason"),
        failure_kind=doc.get("failure_kind"),
        logs=tuple(LogEntry(as_utc(e["at"]), e["msg"]) for e in doc.get("logs") or ()),
        backoff=backoff.get("kind", "exponential"),
        backoff_delay=float(backoff.get("delay", 1.0)),
        backoff_max_delay=float(backoff.get("max_delay", 300.0)),
        journal=tuple(doc.get("journal") or ()),
        attempt_history=tuple(
            attempt_from_record(r, as_utc) for r in doc.get("attempt_history") or ()
        ),
        worker=doc.get("lease_owner"),
        heartbeat_at=as_utc(doc["heartbeat_at"]) if doc.get("heartbeat_at") else None,
        result=doc.get("result"),
        trace_context=doc.get("trace_context") or None,
        timeout=doc.get("timeout"),
        parent_id=doc.get("parent_id"),
        parent_step=doc.get("parent_step"),
    )


# -- update documents shared by the fenced writes and the reaper ----------------------------
def result_fields(result: Any) -> dict[str, Any]:
    """The ``$set`` fields that keep a completion's ``result`` (none for None)."""
    return {} if result is None else {"result": result}


def push_newest(update: dict[str, Any], field: str, entries: list[Any], kept: int) -> None:
    """Make ``update`` also append ``entries`` to the array ``field``, keeping its newest
    ``kept``."""
    update.setdefault("$push", {})[field] = {"$each": entries, "$slice": -kept}


def push_logs(update: dict[str, Any], logs: Sequence[LogEntry]) -> None:
    if logs:
        push_newest(update, "logs", log_documents(logs), MAX_LOG_ENTRIES)


def push_receipt(update: dict[str, Any], token: str, op: str, result: str) -> None:
    """Keep the result of the write ``op`` of ``token`` (the claim's, or a reaper sweep's)
    on the job, so that a repeat after a lost reply finds it (:func:`receipt_of`)."""
    push_newest(update, "receipts", [{"t": token, "op": op, "r": result}], RECEIPTS_KEPT)


def receipt_of(doc: Mapping[str, Any] | None, token: str, op: str) -> Any:
    """The result the receipts of ``doc`` keep for the write ``op`` of ``token``, or None."""
    receipts = (doc or {}).get("receipts") or ()
    return next((r["r"] for r in receipts if r.get("t") == token and r.get("op") == op), None)


def terminal_update(status: str, now: datetime, **fields: Any) -> dict[str, Any]:
    """End a job in ``status``: its dedupe slots, concurrency slot and lease fields go."""
    return {
        "$set": {"status": status, "updated_at": now, "finished_at": now, **fields},
        "$unset": {name: "" for name in (*SLOTS, CONCURRENCY_SLOT, *LEASE_FIELDS)},
    }


def back_to_pending(now: datetime, **fields: Any) -> dict[str, Any]:
    """Hand an active job back: the lease and the concurrency slot go, the active slot
    becomes the pending one."""
    return {
        "$set": {"status": "pending", "updated_at": now, **fields},
        "$unset": {name: "" for name in (CONCURRENCY_SLOT, *LEASE_FIELDS)},
        "$rename": {ACTIVE_SLOT: PENDING_SLOT},
    }
