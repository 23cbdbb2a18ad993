"""Schedules in MongoDB: the four primitives of :class:`durabl.stores.base.Backend` on the
collection ``<collection>_schedules`` (one document per schedule, ``_id`` its name).

MongoDB has no multi-document transaction here (mongomock has none, and the store does not
require a replica set), so a firing is three single-document steps, each atomic:

1. **Compare-and-set** the schedule document (``next_run_at`` and ``definition`` as read,
   no outbox pending) to its new state *and* an ``outbox``: the tick jobs' documents with
   ``_id`` values chosen now. Exactly one process wins this for a tick; a loser writes
   nothing.
2. **Insert** each outbox document. ``_id`` is unique, so repeating this step inserts
   nothing twice.
3. **Clear** the outbox (matched on its first ``_id``) and record ``last_job_id``.

A process that dies between 1 and 3 leaves the outbox behind; every scheduler's next
:meth:`MongoSchedules.load` finishes steps 2-3 for an outbox older than
:data:`OUTBOX_GRACE`, and no later tick fires before that (step 1 needs no outbox).
See ``docs/schedules.md`` for the one window this leaves on MongoDB.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import DuplicateKeyError

from durabl.model.clock import as_utc
from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.stores.mongo import codec
from durabl.stores.mongo.store import MongoStore

#: How old an outbox must be before another process finishes it (its writer may be slow,
#: not dead: this keeps two processes from inserting the same outbox at once).
OUTBOX_GRACE = timedelta(seconds=10)


class MongoSchedules:
    """The schedules of one :class:`~durabl.MongoJobQueue`."""

    def __init__(self, store: MongoStore) -> None:
        self.store = store
        self.col = store.side_collection("schedules")

    # -- the primitives -------------------------------------------------------------------
    def upsert(self, schedule: Schedule, next_run_at: datetime) -> None:
        name, definition = schedule.name, schedule.definition()

        def write() -> None:
            col = self.col
            changed = col.update_one(
                {"_id": name, "definition": {"$ne": definition}},
                {"$set": {"definition": definition, "next_run_at": next_run_at}},
            )
            if changed.matched_count:
                return
            try:
                col.insert_one(
                    {
                        "_id": name,
                        "definition": definition,
                        "next_run_at": next_run_at,
                        "last_run_at": None,
                        "last_job_id": None,
                    }
                )
            except DuplicateKeyError:
                pass  # stored already, with this definition (or just now by a racer)

        self.store.call("upsert_schedule", write)

    def load(self) -> list[Schedule]:
        docs = self.store.call("load_schedules", lambda: list(self.col.find().sort("_id", 1)))
        cutoff = self.store.now() - OUTBOX_GRACE
        for doc in docs:
            outbox_at = doc.get("outbox_at")
            if doc.get("outbox") and outbox_at is not None and as_utc(outbox_at) <= cutoff:
                self.finish(doc["_id"], doc["outbox"])
        return [
            Schedule.from_stored(
                doc["_id"],
                doc["definition"],
                None if doc.get("next_run_at") is None else as_utc(doc["next_run_at"]),
                None if doc.get("last_run_at") is None else as_utc(doc["last_run_at"]),
                doc.get("last_job_id"),
            )
            for doc in docs
        ]

    def delete(self, name: str) -> bool:
        result = self.store.call("delete_schedule", lambda: self.col.delete_one({"_id": name}))
        return result.deleted_count == 1

    def fire(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None:
        outbox = self.claim(schedule, next_run_at, jobs)
        if outbox is None:
            return None
        return self.finish(schedule.name, outbox) if outbox else []

    # -- the steps ------------------------------------------------------------------------
    def claim(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[dict[str, Any]] | None:
        """Step 1: the compare-and-set. The outbox written (empty when no tick fires), or
        None when another process fired the tick or the schedule changed."""
        if schedule.next_run_at is None:
            return None
        now = self.store.now()
        outbox = [codec.new_document(job, now) for _tick, job in jobs]
        update: dict[str, Any] = {"next_run_at": next_run_at}
        if outbox:
            update.update(
                last_run_at=jobs[-1][0],
                last_job_id=str(outbox[-1]["_id"]),
                outbox=outbox,
                outbox_at=now,
            )
        query = {
            "_id": schedule.name,
            "next_run_at": schedule.next_run_at,
            "definition": schedule.definition(),
            "outbox": {"$exists": False},
        }
        # Repeatable: a repeat after a lost reply finds our outbox and takes it as done.
        first_id = outbox[0]["_id"] if outbox else None

        def write() -> bool:
            if self.col.update_one(query, {"$set": update}).modified_count == 1:
                return True
            return first_id is not None and (
                self.col.find_one({"_id": schedule.name, "outbox.0._id": first_id}, {"_id": 1})
                is not None
            )

        return outbox if self.store.call("fire_schedule", write) else None

    def finish(self, name: str, outbox: Sequence[dict[str, Any]]) -> list[str | None]:
        """Steps 2 and 3: insert each outbox document (once: ``_id`` is unique), then clear
        the outbox. The job ids; None for a job whose dedupe slot was taken."""
        ids: list[str | None] = []
        for doc in outbox:

            def insert(doc: dict[str, Any] = doc) -> str | None:
                try:
                    self.store.col.insert_one(dict(doc))
                except DuplicateKeyError:
                    # Ours already (an earlier try, or another process finishing), or a
                    # dedupe slot held by another job: then this tick enqueued nothing.
                    found = self.store.col.find_one({"_id": doc["_id"]}, {"_id": 1})
                    return None if found is None else str(doc["_id"])
                return str(doc["_id"])

            ids.append(self.store.call("fire_schedule", insert))
        first_id = outbox[0]["_id"]
        self.store.call(
            "fire_schedule",
            lambda: self.col.update_one(
                {"_id": name, "outbox.0._id": first_id},
                {"$unset": {"outbox": "", "outbox_at": ""}, "$set": {"last_job_id": ids[-1]}},
            ),
        )
        return ids
