"""Paused types on MongoDB: one document per paused type (``_id`` the type) in the
collection ``<collection>_paused_types``. A ``find_one_and_update`` cannot join the jobs
with another collection, so each store object keeps the set (:class:`PausedTypes`) and its
claims read that: a claim of a plain job reads nothing more, and another process's pause
or resume is seen within the set's refresh (:mod:`durabl.model.pauses`)."""

from __future__ import annotations

from durabl.model.pauses import PausedTypes
from durabl.stores.mongo.store import MongoStore


class MongoPauses:
    """The paused types of one :class:`~durabl.MongoJobQueue`, and its claims' view of them
    (:meth:`is_paused`)."""

    def __init__(self, store: MongoStore) -> None:
        self.store = store
        self.col = store.side_collection("paused_types")
        self.known = PausedTypes(store.clock.monotonic)

    def pause(self, type: str) -> None:
        at = self.store.clock.now()
        self.store.call(
            "pause",
            lambda: self.col.update_one(
                {"_id": type}, {"$setOnInsert": {"paused_at": at}}, upsert=True
            ),
        )
        self.known.note(type, True)

    def resume(self, type: str) -> bool:
        deleted = self.store.call("resume", lambda: self.col.delete_one({"_id": type}))
        self.known.note(type, False)
        return deleted.deleted_count == 1

    def load(self) -> list[str]:
        docs = self.store.call("paused_types", lambda: list(self.col.find({}, {"_id": 1})))
        return [str(doc["_id"]) for doc in docs]

    def is_paused(self, type: str) -> bool:
        """Whether a claim must leave ``type`` out: the set kept here, read again when due."""
        return self.known.is_paused(type, self.load)

    def resumed(self) -> frozenset[str]:
        """The types held paused here that another process resumed (read while any is)."""
        return self.known.resumed(self.load)

    def refresh(self) -> None:
        """Read the stored set now (at startup)."""
        self.known.load(self.load)
