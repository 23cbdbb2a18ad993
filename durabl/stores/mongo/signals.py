"""Signals on MongoDB: kept on their job's document, in the array ``signals`` (deleted
with the job), each stored by one ``find_one_and_update`` that pushes it and counts it
(``signal_count``), so its ``seq`` is its position in the array. Job reads leave the array
out (:data:`~durabl.stores.mongo.store.NO_RECEIPTS`): a job without signals costs nothing
more, and one with them is not read heavier."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ReturnDocument

from durabl.model.clock import as_utc
from durabl.model.signals import Signal, StoredSignal
from durabl.stores.mongo import codec
from durabl.stores.mongo.store import MongoStore

SIGNALS = "signals"
SIGNAL_COUNT = "signal_count"


class MongoSignals:
    """The signals of one :class:`~durabl.MongoJobQueue`'s jobs."""

    def __init__(self, store: MongoStore) -> None:
        self._mongo = store

    def store(self, job_id: str, name: str, data: Any, sent_at: datetime) -> int | None:
        oid = codec.parse_id(job_id)
        if oid is None:
            return None
        live = {"_id": oid, "status": {"$in": ["pending", "active"]}}
        update = {
            "$push": {SIGNALS: {"name": name, "data": data, "sent_at": sent_at}},
            "$inc": {SIGNAL_COUNT: 1},
        }
        doc = self._mongo.call(
            "store_signal",
            lambda: self._mongo.col.find_one_and_update(
                live,
                update,
                projection={SIGNAL_COUNT: 1},
                return_document=ReturnDocument.AFTER,
            ),
            retry=False,  # a repeat after a lost reply would push it twice
        )
        return None if doc is None else int(doc[SIGNAL_COUNT]) - 1

    def next(self, job_id: str, name: str, after_seq: int) -> StoredSignal | None:
        oid = codec.parse_id(job_id)
        if oid is None:
            return None
        doc = self._mongo.call(
            "next_signal", lambda: self._mongo.col.find_one({"_id": oid}, {SIGNALS: 1})
        )
        kept = [] if doc is None else doc.get(SIGNALS) or []
        for seq in range(max(after_seq + 1, 0), len(kept)):
            entry = kept[seq]
            if entry["name"] == name:
                sent = Signal(name, entry["data"], as_utc(entry["sent_at"]))
                return StoredSignal(seq, sent)
        return None
