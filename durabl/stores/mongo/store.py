"""MongoStore: the collection a MongoJobQueue works on, and the plumbing under every call.

The mongomock guard, transient-error retries, the server clock, index creation and the
change-stream support check live here; :mod:`durabl.stores.mongo.operations` adds the operator
queries and the reaper on top, and :mod:`durabl.stores.mongo.backend` the enqueue, claim and
fenced-write path that makes up :class:`MongoJobQueue`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pymongo
from bson.codec_options import CodecOptions
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import PyMongoError

from durabl.model.clock import SYSTEM_CLOCK, Clock, as_utc
from durabl.model.exceptions import DurablError
from durabl.model.options import PUSH_SAFETY_POLL_INTERVAL
from durabl.model.payload import to_millis
from durabl.stores.base import StoreBase
from durabl.stores.mongo.changestream import DEFAULT_BATCH_WINDOW, PushSettings
from durabl.stores.mongo.codec import ACTIVE_SLOT, LEASE_FIELDS, PENDING_SLOT, SLOTS
from durabl.stores.mongo.indexes import ensure_indexes
from durabl.stores.mongo.retry import RETRY_ATTEMPTS, call_with_retries

# The name MongoJobQueue has always logged under (it lived in durabl.stores.mongo.backend).
logger = logging.getLogger("durabl.stores.mongo.backend")

R = TypeVar("R")

SERVER_TIME_REFRESH = 300.0
DEFAULT_SKEW_ALLOWANCE = 2.0
#: The projection every read that builds a Job uses: receipts stay in the store.
NO_RECEIPTS = {"receipts": 0}


# mongomock is not thread-safe, and two backends may share one mongomock database: one
# process-wide lock serialises every mongomock call made by any MongoJobQueue.
_MONGOMOCK_LOCK = threading.RLock()


def is_mongomock(db: Any) -> bool:
    return type(db).__module__.split(".")[0] == "mongomock"


class MongoStore(StoreBase):
    """One collection and how to talk to it; see :class:`durabl.MongoJobQueue` for the
    constructor's arguments."""

    def __init__(
        self,
        db: Database[Any],
        collection: str = "durabl_jobs",
        use_change_streams: bool = False,
        *,
        clock: Clock | None = None,
        server_time: bool = True,
        clock_skew_allowance: float | None = None,
        owns_client: bool = False,
        safety_poll_interval: float = PUSH_SAFETY_POLL_INTERVAL,
        push_batch_window: float = DEFAULT_BATCH_WINDOW,
    ) -> None:
        if not isinstance(collection, str) or not collection:
            raise ValueError(f"collection must be a non-empty string, got {collection!r}")
        if isinstance(safety_poll_interval, bool) or not (
            isinstance(safety_poll_interval, (int, float)) and safety_poll_interval > 0
        ):
            raise ValueError(
                f"safety_poll_interval must be a positive number, got {safety_poll_interval!r}"
            )
        self.db = db
        self.collection_name = collection
        self.use_change_streams = use_change_streams
        #: True once startup() verified change streams; the queue then starts a watcher.
        self.supports_push = False
        self.safety_poll_interval = float(safety_poll_interval)
        self.push_settings = PushSettings(batch_window=push_batch_window)
        self.clock = clock or SYSTEM_CLOCK
        self._mock = is_mongomock(db)
        if clock_skew_allowance is None:
            # One process and one clock on mongomock; hosts differ on a real deployment.
            clock_skew_allowance = 0.0 if self._mock else DEFAULT_SKEW_ALLOWANCE
        self.clock_skew_allowance = float(clock_skew_allowance)
        self._server_time = server_time and not self._mock and clock is None
        self._offset = timedelta(0)
        self._offset_checked_at: float | None = None
        self._owns_client = owns_client
        self._lock: threading.RLock | None = _MONGOMOCK_LOCK if self._mock else None
        self._started = False
        self._startup_lock = threading.Lock()
        self.col: Collection[dict[str, Any]] = db.get_collection(
            collection, codec_options=CodecOptions(tz_aware=True)
        )

    # -- plumbing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def _guard(self, timeout: float | None = None) -> Iterator[None]:
        """Serialise mongomock calls (waiting at most ``timeout``); no-op on a server."""
        if self._lock is None:
            yield
            return
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise DurablError("timed out waiting for the in-process mongomock lock")
        try:
            yield
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def _bounded(self, timeout: float | None) -> Iterator[None]:
        """Bound every server round trip inside, retries included (pymongo's CSOT)."""
        if timeout is None or self._lock is not None:
            yield
            return
        with pymongo.timeout(timeout):
            yield

    def call(self, operation: str, fn: Callable[[], R], *, retry: bool = True) -> R:
        """Run ``fn`` under the mongomock guard; repeat transient errors when ``retry``. The
        seam every read and write of the collection goes through (the change-stream watcher
        included)."""

        def guarded() -> R:
            with self._guard():
                return fn()

        return call_with_retries(operation, guarded, attempts=RETRY_ATTEMPTS if retry else 1)

    def now(self) -> datetime:
        """The server's clock where it tells us, else this host's."""
        if self._server_time:
            mono = time.monotonic()
            if (
                self._offset_checked_at is None
                or mono - self._offset_checked_at > SERVER_TIME_REFRESH
            ):
                self._offset_checked_at = mono
                self._measure_offset()
        # BSON keeps milliseconds: round here so what we compare is what we stored.
        return to_millis(self.clock.now() + self._offset)

    def _measure_offset(self) -> None:
        try:
            before = self.clock.now()
            reply = self.db.command("hello")
            after = self.clock.now()
        except PyMongoError as exc:
            logger.debug("could not read server time, using local clock: %s", exc)
            return
        server = reply.get("localTime")
        if isinstance(server, datetime):
            midpoint = before + (after - before) / 2
            self._offset = as_utc(server) - midpoint

    # -- startup --------------------------------------------------------------------------
    def push_unavailable(self) -> str | None:
        if not self.use_change_streams:
            return "change streams are off (use_change_streams=False)"
        if not self.supports_push:
            return "push pickup is not verified yet (the store's startup() has not run)"
        return None

    def startup(self) -> None:
        """Create the indexes (idempotent) and check change-stream support if asked."""
        with self._startup_lock:
            if self._started:
                return
            self.call("startup", lambda: ensure_indexes(self.col, mongomock=self._mock))
            if self.use_change_streams:
                self._check_change_streams()
            self._started = True

    def _check_change_streams(self) -> None:
        if self._mock:
            raise DurablError(
                "use_change_streams=True needs a MongoDB replica set or sharded cluster; "
                "mongomock has no change streams"
            )
        try:
            hello = self.db.command("hello")
        except PyMongoError as exc:
            raise DurablError(f"could not check change-stream support: {exc}") from exc
        if "setName" not in hello and hello.get("msg") != "isdbgrid":
            raise DurablError(
                "use_change_streams=True needs a MongoDB replica set or sharded cluster; "
                "this server is standalone (a single-node replica set works for development)"
            )
        self.supports_push = True

    def close(self) -> None:
        if self._owns_client:
            self.db.client.close()

    def drop(self) -> None:
        """Delete the collection (tests and the demo)."""
        with self._guard():
            self.col.drop()
        self._started = False

    # -- update documents shared by the fenced writes and the reaper ----------------------
    def _terminal_update(self, status: str, now: datetime, **fields: Any) -> dict[str, Any]:
        return {
            "$set": {"status": status, "updated_at": now, "finished_at": now, **fields},
            "$unset": {name: "" for name in (*SLOTS, *LEASE_FIELDS)},
        }

    def _back_to_pending(self, now: datetime, **fields: Any) -> dict[str, Any]:
        return {
            "$set": {"status": "pending", "updated_at": now, **fields},
            "$unset": {name: "" for name in LEASE_FIELDS},
            "$rename": {ACTIVE_SLOT: PENDING_SLOT},
        }
