"""Event subscriptions on MongoDB: the three primitives of
:class:`durabl.stores.base.Backend` on the collection ``<collection>_subscriptions``, one
document per subscription, each one command.

A document's ``_id`` is the pair itself (``{"event": ..., "type": ...}``): the collection
needs no index of its own to keep a subscription stored once, and an upsert of one already
stored matches it and writes nothing."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pymongo.errors import DuplicateKeyError

from durabl.model.subscriptions import Subscription
from durabl.stores.mongo.store import MongoStore


def _id(subscription: Subscription) -> dict[str, str]:
    return {"event": subscription.event, "type": subscription.type}


class MongoSubscriptions:
    """The event subscriptions of one :class:`~durabl.MongoJobQueue`."""

    def __init__(self, store: MongoStore) -> None:
        self.store = store
        self.col = store.side_collection("subscriptions")

    def upsert(self, subscriptions: Sequence[Subscription]) -> None:
        # One command each (a process records a handful, when it starts): mongomock has no
        # working bulk_write, and each upsert is atomic on its own.
        for subscription in subscriptions:
            self.store.call("upsert_subscriptions", functools.partial(self._upsert, subscription))

    def _upsert(self, subscription: Subscription) -> None:
        key = _id(subscription)
        try:
            self.col.update_one({"_id": key}, {"$setOnInsert": key}, upsert=True)
        except DuplicateKeyError:
            pass  # a racing process stored it between our match and insert: it is stored

    def load(self, event: str | None) -> list[Subscription]:
        query = {} if event is None else {"_id.event": event}
        docs = self.store.call("load_subscriptions", lambda: list(self.col.find(query)))
        return [Subscription(str(d["_id"]["event"]), str(d["_id"]["type"])) for d in docs]

    def delete(self, subscription: Subscription) -> bool:
        result = self.store.call(
            "delete_subscription", lambda: self.col.delete_one({"_id": _id(subscription)})
        )
        return result.deleted_count == 1
