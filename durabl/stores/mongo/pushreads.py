"""The change-stream watcher on MongoDB: the stream it opens and the reads it makes (see
:mod:`durabl.stores.mongo.changestream`), each read through :meth:`MongoStore.call`, as
every other read of the store."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import pymongo

from durabl.model.clock import as_utc
from durabl.stores.base import PushListener
from durabl.stores.mongo.changestream import (
    ChangeStreamLike,
    PushSettings,
    Token,
    claimable_pipeline,
)
from durabl.stores.mongo.flow import KEY
from durabl.stores.mongo.store import MongoStore
from durabl.stores.mongo.watcher import Watcher


def open_watcher(
    store: MongoStore,
    listener: PushListener,
    settings: PushSettings,
    resumed: Callable[[], Iterable[str]] | None = None,
) -> Watcher:
    """A watcher on ``store``'s collection reporting to ``listener`` (not started);
    ``resumed`` names the paused types another process resumed (the watcher wakes them:
    no job changed, so the stream says nothing of a resume)."""
    col = store.col
    pipeline = claimable_pipeline()
    await_ms = max(int(settings.await_seconds * 1000), 1)

    def open_stream(resume_after: Token | None, start_after: Token | None) -> ChangeStreamLike:
        with pymongo.timeout(settings.open_timeout):
            return col.watch(
                pipeline,
                resume_after=resume_after,
                start_after=start_after,
                max_await_time_ms=await_ms,
            )

    reads = WatcherReads(store)
    return Watcher(
        open_stream,
        listener,
        clock=store.clock,
        now=store.now,
        lookup=reads.lookup,
        next_run_at=reads.next_run_at,
        waiting=reads.waiting,
        settings=settings,
        resumed=resumed,
    )


class WatcherReads:
    """The watcher's :data:`~durabl.stores.mongo.changestream.Lookup`,
    :data:`~durabl.stores.mongo.changestream.NextRunAt` and
    :data:`~durabl.stores.mongo.changestream.Waiting` on ``store``'s collection."""

    def __init__(self, store: MongoStore) -> None:
        self.store = store

    def lookup(self, ids: Sequence[Any]) -> list[tuple[str, datetime]]:
        """``(type, run_at)`` of the jobs ``ids`` that are pending."""

        def read() -> list[tuple[str, datetime]]:
            cursor = self.store.col.find(
                {"_id": {"$in": list(ids)}, "status": "pending"}, {"type": 1, "run_at": 1}
            )
            return [(doc["type"], doc["run_at"]) for doc in cursor]

        return self.store.call("change-stream lookup", read)

    def next_run_at(self, type: str, after: datetime) -> datetime | None:
        """The earliest pending ``run_at`` of ``type`` after ``after``."""

        def read() -> datetime | None:
            doc = self.store.col.find_one(
                {"type": type, "status": "pending", "run_at": {"$gt": after}},
                {"run_at": 1},
                sort=[("run_at", 1)],
            )
            return None if doc is None else as_utc(doc["run_at"])

        return self.store.call("change-stream discovery", read)

    def waiting(self, ids: Sequence[Any], types: Sequence[str]) -> Counter[str]:
        """The jobs ``ids`` freed a slot of their key: for each of ``types`` with a due job
        pending on one of those keys, how many of the freed slots it may take. Two reads:
        the keys of ``ids``, then the (key, type) pairs with due pending jobs (on the
        index of keyed jobs by key and status)."""

        def read() -> Counter[str]:
            col = self.store.col
            found = col.find({"_id": {"$in": list(ids)}, KEY: {"$exists": True}}, {KEY: 1})
            freed: list[str] = [doc[KEY] for doc in found]
            keys = sorted(set(freed))
            if not keys or not types:
                return Counter()
            due_on_keys = {
                KEY: {"$in": keys},
                "status": "pending",
                "type": {"$in": list(types)},
                "run_at": {"$lte": self.store.now()},
            }
            pairs = col.aggregate(
                [
                    {"$match": due_on_keys},
                    {"$group": {"_id": {"key": f"${KEY}", "type": "$type"}}},
                ]
            )
            waiting_on: defaultdict[str, list[str]] = defaultdict(list)
            for pair in pairs:
                waiting_on[pair["_id"]["key"]].append(pair["_id"]["type"])
            return Counter(type for key in freed if key in waiting_on for type in waiting_on[key])

        return self.store.call("change-stream freed keys", read)
