"""Everything a MongoDB store does differently on mongomock, the in-process stand-in the
tests and ``mongomock://`` URLs use (what it gets wrong: docs/testing.md, "mongomock").

A :class:`~durabl.stores.mongo.store.MongoStore` picks its calls once, when it is built:
:class:`~durabl.stores.mongo.store.PymongoCalls` on a server (plain pymongo), or
:class:`MongomockCalls` here, which

- serialises every call behind one process-wide lock: mongomock is not thread-safe, and
  two stores may share one mongomock database;
- sets no pymongo deadline (mongomock has no topology to select a server from);
- inherits no write concern (on a mongomock database the attribute names a collection);
- reads no server clock (mongomock has no ``hello``) and allows no clock skew (one
  process, one clock);
- marks the unique indexes sparse: mongomock ignores a partial filter while it builds a
  unique index over existing documents, where every job without a slot would clash
  (sparse means the same for an ``$exists`` filter; a server refuses both together);
- sends updates in a bulk write as its bulk builder accepts them;
- refuses change streams;
- applies a bounded debounce push (``$add`` of a date in a pipeline update) itself.

``mongomock://`` URLs get one client per process (:func:`mongomock_client`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from bson import ObjectId
from pymongo import UpdateOne

from durabl.model.exceptions import DurablError
from durabl.model.rules import HolderUpdate, debounced_run_at
from durabl.stores.mongo.codec import fence
from durabl.stores.mongo.indexes import IndexSpec

R = TypeVar("R")

#: Serialises every mongomock call made by any store of the process.
_LOCK = threading.RLock()


def is_mongomock(db: Any) -> bool:
    return type(db).__module__.split(".")[0] == "mongomock"


class MongomockUpdateOne(UpdateOne):
    """An ``UpdateOne`` that mongomock's bulk builder accepts: pymongo >= 4.11 hands the
    builder a ``sort=`` keyword that mongomock 4.3's ``add_update`` does not take."""

    __slots__ = ()

    def _add_to_bulk(self, bulkobj: Any) -> None:
        bulkobj.add_update(self._filter, self._doc, False, False)


class MongomockCalls:
    """The calls of :class:`~durabl.stores.mongo.store.PymongoCalls`, as mongomock needs
    them (see the module's docstring)."""

    lock: threading.RLock | None = _LOCK
    skew_allowance = 0.0
    server_clock = False
    update_request: type[UpdateOne] = MongomockUpdateOne

    def run(self, fn: Callable[[], R], timeout: float | None) -> R:
        if not _LOCK.acquire(timeout=-1 if timeout is None else timeout):
            raise DurablError("timed out waiting for the in-process mongomock lock")
        try:
            return fn()
        finally:
            _LOCK.release()

    def deadline(
        self, db: Any, timeout: float, read_preference: Any
    ) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def write_concern(self, db: Any) -> None:
        return None

    def create_indexes(self, col: Any, specs: list[IndexSpec]) -> None:
        """One at a time: mongomock's ``create_indexes`` drops ``partialFilterExpression``.
        A unique index is sparse as well, as mongomock applies no partial filter."""
        for spec in specs:
            options = (
                {**spec.options, "sparse": True} if spec.options.get("unique") else spec.options
            )
            col.create_index(spec.keys, name=spec.name, **options)

    def push_bounded(
        self, col: Any, holder: Mapping[str, Any], changes: Mapping[str, Any], update: HolderUpdate
    ) -> bool:
        """As ``PymongoCalls.push_bounded``; mongomock's pipeline ``$add`` takes no dates, so
        the holder's created_at is read and the bound applied here, in two calls that
        are one step for every other store call: this runs under the process-wide lock
        (:meth:`run`)."""
        found = col.find_one(holder, {"created_at": 1, "run_at": 1})
        if found is None:
            return False
        run_at = debounced_run_at(update, found["run_at"], found["created_at"])
        query = {**holder, "_id": found["_id"]}
        return bool(col.update_one(query, {"$set": {**changes, "run_at": run_at}}).matched_count)

    def check_change_streams(self, db: Any) -> None:
        raise DurablError(
            "use_change_streams=True needs a MongoDB replica set or sharded cluster; "
            "mongomock has no change streams"
        )


def fenced_update(
    job_id: ObjectId, token: str, update: Mapping[str, Any], *, mongomock: bool
) -> UpdateOne:
    """One fenced write's bulk request as a store on mongomock makes it, or (``mongomock``
    False) as one on a server does: pymongo's own ``UpdateOne``."""
    request = MongomockCalls.update_request if mongomock else UpdateOne
    return request(fence(job_id, token), update)


_client_lock = threading.Lock()
_client: Any = None


def mongomock_client() -> Any:
    """One mongomock client per process: two clients would not share data."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                import mongomock
            except ImportError as exc:
                raise DurablError(
                    "mongomock:// needs the mongomock package (pip install 'durabl[test]')"
                ) from exc
            _client = mongomock.MongoClient(tz_aware=True)
        return _client


def database_in_url(url: str) -> str | None:
    """``mongomock:///app``, ``mongomock://host/app`` or plain ``mongomock://app``."""
    parts = urlsplit(url)
    return unquote(parts.path.lstrip("/")) or unquote(parts.netloc) or None
