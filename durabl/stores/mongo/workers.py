"""The live workers registry on MongoDB: the four primitives of
:class:`durabl.stores.base.Backend` on the collection ``<collection>_workers`` (one document
per worker process, ``_id`` its id), each one command.

The writes a queue's presence thread makes in the background (a refresh, a prune) are
bounded by ``REGISTRY_REFRESH_TIMEOUT``, repeats included, whatever the URL's server
selection timeout: while no server answers, that thread must stay free for the entry's
removal at shutdown (bounded by the backend's ``delete_worker``)."""

from __future__ import annotations

from datetime import datetime

from durabl.model.clock import as_utc
from durabl.model.workers import WorkerInfo
from durabl.stores.mongo.store import REGISTRY_REFRESH_TIMEOUT, MongoStore


class MongoWorkers:
    """The workers registry of one :class:`~durabl.MongoJobQueue`."""

    def __init__(self, store: MongoStore) -> None:
        self.store = store
        self.col = store.side_collection("workers")

    def upsert(self, info: WorkerInfo) -> None:
        doc = {
            "host": info.host,
            "pid": info.pid,
            # a list of pairs: a type name may hold characters a field name may not
            "concurrency": [[t, n] for t, n in sorted(info.concurrency.items())],
            "started_at": info.started_at,
            "last_seen": info.last_seen,
            "active": info.active,
            "heartbeat_interval": info.heartbeat_interval,
        }
        with self.store.bounded(REGISTRY_REFRESH_TIMEOUT):
            self.store.call(
                "upsert_worker",
                lambda: self.col.replace_one({"_id": info.id}, doc, upsert=True),
            )

    def load(self) -> list[WorkerInfo]:
        docs = self.store.call("load_workers", lambda: list(self.col.find().sort("_id", 1)))
        return [
            WorkerInfo(
                id=doc["_id"],
                host=doc["host"],
                pid=int(doc["pid"]),
                concurrency={str(t): int(n) for t, n in doc["concurrency"]},
                started_at=as_utc(doc["started_at"]),
                last_seen=as_utc(doc["last_seen"]),
                active=int(doc["active"]),
                heartbeat_interval=float(doc["heartbeat_interval"]),
            )
            for doc in docs
        ]

    def delete(self, worker_id: str) -> bool:
        result = self.store.call("delete_worker", lambda: self.col.delete_one({"_id": worker_id}))
        return result.deleted_count == 1

    def prune(self, last_seen_before: datetime) -> int:
        with self.store.bounded(REGISTRY_REFRESH_TIMEOUT):
            result = self.store.call(
                "prune_workers",
                lambda: self.col.delete_many({"last_seen": {"$lt": last_seen_before}}),
            )
        return int(result.deleted_count)
