"""Schedules in MongoDB: the primitives of :class:`durabl.stores.base.Backend` on the
collection ``<collection>_schedules`` (one document per schedule, ``_id`` its name).

With no multi-document transaction, a firing is three steps of single-document writes
(docs/schedules.md, "MongoDB", says why they cannot run a tick twice): (1) the
compare-and-set of the schedule document writes its new state and an *outbox* of the tick
jobs' documents (:meth:`MongoSchedules.claim`); (2) each is placed: inserted *held*,
released only if its nonce owns its outbox entry (:meth:`MongoSchedules.place`); (3) the
outbox is cleared. An outbox older than :data:`OUTBOX_GRACE` is finished by the next
:meth:`MongoSchedules.load` of any process; the reaper deletes held copies nobody will
release (:meth:`MongoSchedules.sweep_held`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from pymongo.errors import DuplicateKeyError

from durabl.model.clock import as_utc
from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.stores.mongo import codec
from durabl.stores.mongo.store import MongoStore

#: How old an outbox must be before another process finishes it (its writer may be slow,
#: not dead: this keeps two processes from finishing the same outbox at once).
OUTBOX_GRACE = timedelta(seconds=10)
#: A job of an outbox is inserted with this ``run_at`` (no claim takes it) and this field
#: holding a nonce of the attempt that inserted it, until it is released.
HELD_RUN_AT = datetime(9999, 1, 1, tzinfo=timezone.utc)
HOLD = "schedule_hold"
#: In an outbox entry: the nonce of the held copy that may be released.
OWNER = "owner"


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
                bool(doc.get("paused")),
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

    def set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> bool:
        changes: dict[str, Any] = {"paused": paused}
        if next_run_at is not None:
            changes["next_run_at"] = next_run_at
        result = self.store.call(
            "pause_schedule", lambda: self.col.update_one({"_id": name}, {"$set": changes})
        )
        return result.matched_count == 1

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
            "paused": {"$ne": True},
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
        """Steps 2 and 3: put each outbox job in the collection (:meth:`place`, once, even
        if a paused writer repeats it after the job ran and was deleted), then clear the
        outbox. The job ids; None for a job whose dedupe slot was taken."""
        ids = [self.place(name, doc) for doc in outbox]
        first_id = outbox[0]["_id"]
        self.store.call(
            "fire_schedule",
            lambda: self.col.update_one(
                {"_id": name, "outbox.0._id": first_id},
                {"$unset": {"outbox": "", "outbox_at": ""}, "$set": {"last_job_id": ids[-1]}},
            ),
        )
        return ids

    def place(self, name: str, entry: Mapping[str, Any]) -> str | None:
        """Step 2 for one outbox job, so that it runs only once: (a) insert it held
        (:data:`HELD_RUN_AT`, :data:`HOLD` a nonce of this attempt; a duplicate ``_id``:
        it is there already); (b) make the held copy's nonce the entry's :data:`OWNER`
        unless it has one; (c) release the owner's copy (its ``run_at`` back to the tick)
        and delete any other: one inserted after the tick's job ran and was deleted."""
        job_id = entry["_id"]
        doc = {k: v for k, v in entry.items() if k != OWNER}
        jobs = self.store.col

        def insert() -> str | bool:
            """The nonce of the held copy (this attempt's, or the one found there); True
            when the job is there released already, False when its dedupe slot was taken
            by another job (then this tick enqueues nothing)."""
            nonce = uuid.uuid4().hex
            try:
                jobs.insert_one({**doc, "run_at": HELD_RUN_AT, HOLD: nonce})
            except DuplicateKeyError:
                found = jobs.find_one({"_id": job_id}, {HOLD: 1})
                if found is None:
                    return False
                return True if found.get(HOLD) is None else str(found[HOLD])
            return nonce

        held = self.store.call("fire_schedule", insert)
        if isinstance(held, bool):
            return str(job_id) if held else None
        nonce = held

        def own() -> str | None:
            """The entry's owner after the compare-and-set; None when the entry is gone."""
            self.col.update_one(
                {"_id": name, "outbox": {"$elemMatch": {"_id": job_id, OWNER: {"$exists": False}}}},
                {"$set": {f"outbox.$.{OWNER}": nonce}},
            )
            state = self.col.find_one({"_id": name, "outbox._id": job_id}, {"outbox": 1})
            if state is None:
                return None
            return next((e.get(OWNER) for e in state["outbox"] if e.get("_id") == job_id), None)

        owner = self.store.call("fire_schedule", own)
        if owner == nonce:
            self.store.call(
                "fire_schedule",
                lambda: jobs.update_one(
                    {"_id": job_id, HOLD: nonce},
                    {"$set": {"run_at": doc["run_at"]}, "$unset": {HOLD: ""}},
                ),
            )
        else:  # a copy inserted after the tick's job ran and was deleted
            self.store.call("fire_schedule", lambda: jobs.delete_one({"_id": job_id, HOLD: nonce}))
        return str(job_id)

    def sweep_held(self, *, limit: int = 100) -> int:
        """Delete the held copies nobody will release (run by the reaper's sweep): late
        ones a paused writer inserted and died before deleting, which would hold their
        dedupe slot for good. A copy is deleted only when its outbox entry is gone or is
        owned by another nonce; no age is needed, as the delete is fenced on the copy's
        nonce and the owner's copy is released before its entry is cleared. The number
        deleted."""
        jobs = self.store.col

        def sweep() -> int:
            deleted = 0
            held = jobs.find({HOLD: {"$exists": True}}, {HOLD: 1}).limit(limit)
            for copy in list(held):
                state = self.col.find_one({"outbox._id": copy["_id"]}, {"outbox": 1})
                outbox = state["outbox"] if state else ()
                entry = next((e for e in outbox if e.get("_id") == copy["_id"]), None)
                if entry is not None and entry.get(OWNER) in (None, copy[HOLD]):
                    continue
                done = jobs.delete_one({"_id": copy["_id"], HOLD: copy[HOLD]})
                deleted += done.deleted_count
            return deleted

        return int(self.store.call("reap", sweep))
