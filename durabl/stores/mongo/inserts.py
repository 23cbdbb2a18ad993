"""A chunk of a bulk enqueue on MongoDB: one unordered ``insert_many``, each job's dedupe
outcome read from the duplicate-key errors of its ``BulkWriteError``, then the cross-scope
check of the keys (as a single enqueue makes it, after inserting: both racers of a
cross-scope pair see each other and back out)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bson import ObjectId
from pymongo.errors import BulkWriteError

from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.options import NewJob
from durabl.stores.mongo import codec
from durabl.stores.mongo.store import MongoStore

logger = logging.getLogger(__name__)

#: The server's code for a write refused by a unique index.
DUPLICATE_KEY = 11000


def insert_many(store: MongoStore, jobs: Sequence[NewJob]) -> list[str | None]:
    """Store ``jobs`` (none coalesces, no two share a key): the id of each, in order, or
    None where its dedupe slot is taken. ``DedupeScopeConflictError`` when a key is live
    under the other scope: the chunk's jobs are backed out first."""
    now = store.now()
    docs = [codec.new_document(job, now) for job in jobs]
    for job, doc in zip(jobs, docs, strict=True):
        codec.check_document_size(job.type, doc)
    refused = store.call("enqueue_many", lambda: _insert(store, docs))
    if refused:
        # A fresh ObjectId clashes only with this insert's own earlier write (a repeat
        # after a lost reply): only with no document of its _id is the clash a slot.
        ids = [docs[i]["_id"] for i in refused]
        ours = store.call(
            "enqueue_many", lambda: {d["_id"] for d in store.col.find({"_id": {"$in": ids}})}
        )
        refused = {i for i in refused if docs[i]["_id"] not in ours}
    made = [i for i in range(len(docs)) if i not in refused]
    _check_scopes(store, [jobs[i] for i in made], [docs[i]["_id"] for i in made])
    return [None if i in refused else str(doc["_id"]) for i, doc in enumerate(docs)]


def _insert(store: MongoStore, docs: list[dict[str, Any]]) -> set[int]:
    """One unordered ``insert_many``: the positions a unique index refused."""
    try:
        store.col.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        if any(error.get("code") != DUPLICATE_KEY for error in errors):
            raise
        return {int(error["index"]) for error in errors}
    return set()


def _check_scopes(store: MongoStore, jobs: list[NewJob], ids: list[ObjectId]) -> None:
    """Raise, the inserted jobs backed out, when one of their keys is held under the other
    scope by a job that is not of this chunk."""
    others: list[dict[str, Any]] = []
    for scope in ("pending", "pending+active"):
        keys = [job.dedupe_key for job in jobs if job.dedupe_key and job.dedupe_scope == scope]
        if keys:
            others.extend({slot: {"$in": keys}} for slot in codec.other_scope_slots(scope))
    if not others:
        return
    query = {"$or": others, "_id": {"$nin": ids}}
    other = store.call(
        "dedupe scope check",
        lambda: store.col.find_one(query, {"dedupe_key": 1, "dedupe_scope": 1}),
    )
    if other is None:
        return
    removed = store.call(
        "dedupe scope back-out",
        lambda: store.col.delete_many({"_id": {"$in": ids}, "status": "pending"}).deleted_count,
    )
    if removed < len(ids):
        logger.warning(
            "%d job(s) of a batch were claimed before its dedupe scope conflict could be "
            "backed out",
            len(ids) - removed,
        )
    live = other.get("dedupe_scope") or "unknown"
    requested = "pending+active" if live == "pending" else "pending"
    raise DedupeScopeConflictError(other.get("dedupe_key") or "", requested, live)
