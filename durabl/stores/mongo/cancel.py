"""Cancelling on MongoDB: a pending job ends ``cancelled`` in one update; an active one
gets ``cancel_requested`` (the reason), which its heartbeat reports and which turns any
later outcome of the run but a completion into ``cancelled``.

The fenced writes that would hand a run back (retry, release, fail) carry
``cancel_requested: {$exists: false}`` in their filter; one that misses on it alone ends
the run here instead (a read and a write, only for a cancelled run).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bson import ObjectId

from durabl.model.job import CancelOutcome
from durabl.model.rules import cancelled_reason
from durabl.stores.mongo import codec
from durabl.stores.mongo.attempts import ClaimInfo, push_attempt
from durabl.stores.mongo.store import MongoStore

#: Added to a fenced filter: the write applies only while no cancellation is requested.
NOT_CANCELLED: Mapping[str, Any] = {"cancel_requested": {"$exists": False}}


def cancel(store: MongoStore, oid: ObjectId, reason: str, now: datetime) -> CancelOutcome:
    """Cancel the pending job ``oid``, or request it of the active one."""
    pending, request = _cancel_updates(reason, now)
    if store.col.update_one({"_id": oid, "status": "pending"}, pending).matched_count:
        return "cancelled"
    active = {"_id": oid, "status": "active", **NOT_CANCELLED}
    if store.col.update_one(active, request).matched_count:
        return "requested"
    return "not-cancellable"


def cancel_matching(store: MongoStore, query: Mapping[str, Any], reason: str, now: datetime) -> int:
    """:func:`cancel` every job ``query`` selects: one ``update_many`` for the pending ones,
    one for the active ones (each atomic per job); how many of both."""
    pending, request = _cancel_updates(reason, now)
    cancelled = store.col.update_many({"$and": [query, {"status": "pending"}]}, pending)
    active = {"$and": [query, {"status": "active", **NOT_CANCELLED}]}
    return cancelled.modified_count + store.col.update_many(active, request).modified_count


def _cancel_updates(reason: str, now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """The update that cancels a pending job, and the one that requests it of an active."""
    pending = codec.terminal_update("cancelled", now, fail_reason=reason)
    return pending, {"$set": {"cancel_requested": reason}}


def requested_in(doc: Mapping[str, Any] | None, token: str) -> str | None:
    """The cancellation reason requested of the claim ``token`` holds, as ``doc`` (a read
    of the job's status, claim token and request) shows it; None when there is none."""
    if doc is None or doc.get("status") != "active" or doc.get("claim_token") != token:
        return None
    return doc.get("cancel_requested")


def cancelled_update(
    now: datetime, reason: str | None, claim: ClaimInfo | None
) -> tuple[dict[str, Any], str]:
    """The update that ends a claimed run as ``cancelled``, and the reason it keeps."""
    reason = cancelled_reason(reason)
    update = codec.terminal_update("cancelled", now, fail_reason=reason)
    return push_attempt(update, claim, now, "cancelled", reason), reason
