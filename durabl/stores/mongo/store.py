"""MongoStore: the collection a MongoJobQueue works on, and the plumbing under every call.

Transient-error retries, deadlines, the server clock and index creation live here. A
:class:`~durabl.stores.mongo.MongoJobQueue` owns one and hands it to its parts (claims,
fenced writes, queries, the reaper, the change-stream watcher...), which all reach the
collection through :meth:`MongoStore.call`. What the store does on a server is plain
pymongo (:class:`PymongoCalls`); mongomock's needs are all in
:mod:`durabl.stores.mongo.mongomock_adapter`, picked once when the store is built.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pymongo
from bson.codec_options import CodecOptions
from pymongo import UpdateOne, common
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import PyMongoError
from pymongo.read_preferences import Primary, PrimaryPreferred, ReadPreference
from pymongo.write_concern import WriteConcern

from durabl.model.clock import Clock, as_utc
from durabl.model.exceptions import DurablError
from durabl.model.payload import to_millis
from durabl.model.rules import HolderUpdate
from durabl.stores.mongo.indexes import IndexSpec, ensure_indexes, index_models
from durabl.stores.mongo.mongomock_adapter import MongomockCalls, is_mongomock
from durabl.stores.mongo.retry import RETRY_ATTEMPTS, call_with_retries

# The name MongoJobQueue has always logged under (it lived in durabl.stores.mongo.backend).
logger = logging.getLogger("durabl.stores.mongo.backend")

R = TypeVar("R")

SERVER_TIME_REFRESH = 300.0
#: Seconds a reading of the server's clock may take (every SERVER_TIME_REFRESH, from the
#: first operation that needs the time, a registry refresh among them): one given up keeps
#: the offset measured last (none at first: this host's clock).
SERVER_TIME_TIMEOUT = 1.0
DEFAULT_SKEW_ALLOWANCE = 2.0
#: The projection every read that builds a Job uses: receipts (and signals) stay in the
#: store.
NO_RECEIPTS = {"receipts": 0, "signals": 0}
#: What durabl's writes wait for unless the user chose otherwise: a majority of the replica
#: set has the write, in its journal. An acknowledged job then survives a crash of the
#: primary and the rollback a failover makes of writes only it had (docs/operations.md).
DURABLE_WRITE_CONCERN = WriteConcern(w="majority", j=True)
#: Seconds :meth:`MongoStore.close` gives pymongo to end the client's server sessions.
CLOSE_TIMEOUT = 0.5
#: Seconds a queue's registry entry's removal may take (its last write as it shuts down or
#: its process exits; within the drain's grace and the exit's wait).
REGISTRY_REMOVAL_TIMEOUT = 1.0
#: Seconds a refresh of a queue's registry entry (or a prune of long-gone entries) may
#: take: one named thread makes them and then the removal, so a refresh that waited a
#: whole server selection (and its repeats) would hold the removal up at shutdown. A
#: refresh given up is made again at the next interval; an entry shows gone only after
#: three intervals without one.
REGISTRY_REFRESH_TIMEOUT = 1.0
#: How often pymongo looks again for a usable server while it has none
#: (``common.MIN_HEARTBEAT_INTERVAL``): its deadlines are checked only that often.
SELECTION_STEP = common.MIN_HEARTBEAT_INTERVAL
#: A pymongo deadline that is past by the time pymongo looks at it: fail without waiting
#: (``pymongo.timeout(0)`` would mean no deadline at all).
NO_WAIT = 1e-6


def write_concern_for(inherited: WriteConcern | None, chosen: WriteConcern | None) -> WriteConcern:
    """The write concern of every collection durabl writes: ``chosen`` when given, else the
    one ``inherited`` from the database (its client or URL) unless that is the server's
    default, else :data:`DURABLE_WRITE_CONCERN`: a durable queue must not depend on the
    server's default, which may be ``w: 1``."""
    if chosen is None:
        keep = inherited is not None and not inherited.is_server_default
        chosen = inherited if keep else DURABLE_WRITE_CONCERN
    if not isinstance(chosen, WriteConcern):
        raise TypeError(f"write_concern must be a pymongo WriteConcern, got {chosen!r}")
    if not chosen.acknowledged:
        # Dedupe, fencing and receipts all read the server's answer to a write.
        raise ValueError(f"durabl needs acknowledged writes, not {chosen.document}")
    return chosen


class PymongoCalls:
    """The calls a store makes on a MongoDB server that mongomock cannot make the same way
    (its own are :class:`~durabl.stores.mongo.mongomock_adapter.MongomockCalls`)."""

    #: A server serialises nothing for us.
    lock: threading.RLock | None = None
    #: Seconds added to every lease deadline the reaper checks: hosts' clocks differ.
    skew_allowance = DEFAULT_SKEW_ALLOWANCE
    #: Lease times come from the server's clock.
    server_clock = True
    update_request: type[UpdateOne] = UpdateOne

    def run(self, fn: Callable[[], R], timeout: float | None) -> R:
        return fn()

    def deadline(
        self, db: Database[Any], timeout: float, read_preference: Primary | PrimaryPreferred
    ) -> AbstractContextManager[None]:
        """A pymongo deadline (CSOT) that keeps every round trip inside, retries included,
        within ``timeout`` seconds, even while no server answers.

        While no server for ``read_preference`` is known up, pymongo waits for one in
        steps of :data:`SELECTION_STEP` and looks at its deadline only between them, so it
        overruns the deadline by up to a step: such a call gets a step less (and a
        deadline already past, so no wait at all, when ``timeout`` is shorter than a step).
        With a server up, it selects at once and the call gets all of ``timeout``."""
        if not db.client.topology_description.apply_selector(read_preference, None):
            timeout = max(timeout - SELECTION_STEP, NO_WAIT)
        return pymongo.timeout(timeout)

    def write_concern(self, db: Database[Any]) -> WriteConcern:
        return db.write_concern

    def create_indexes(self, col: Collection[dict[str, Any]], specs: list[IndexSpec]) -> None:
        col.create_indexes(index_models(specs))  # one command for all of them

    def push_bounded(
        self,
        col: Collection[Any],
        holder: Mapping[str, Any],
        changes: Mapping[str, Any],
        update: HolderUpdate,
    ) -> bool:
        """Apply ``changes`` to the job ``holder`` finds and push its run_at as
        ``rules.debounced_run_at`` says, bounded by its own created_at: one pipeline
        update (every value a ``$literal``, so no payload is read as an expression).
        Whether a job matched."""
        assert update.push_to is not None and update.within_ms is not None
        bound = {"$add": ["$created_at", update.within_ms]}
        stage = {name: {"$literal": value} for name, value in changes.items()}
        pushed = {"$min": [{"$literal": update.push_to}, bound]}
        stage["run_at"] = {"$max": ["$run_at", pushed]}
        return col.update_one(holder, [{"$set": stage}]).matched_count == 1

    def check_change_streams(self, db: Database[Any]) -> None:
        try:
            hello = db.command("hello")
        except PyMongoError as exc:
            raise DurablError(f"could not check change-stream support: {exc}") from exc
        if "setName" not in hello and hello.get("msg") != "isdbgrid":
            raise DurablError(
                "use_change_streams=True needs a MongoDB replica set or sharded cluster; "
                "this server is standalone (a single-node replica set works for development)"
            )


class MongoStore:
    """One collection and how to talk to it; see :class:`durabl.MongoJobQueue` for the
    arguments.

    ``calls`` are the store's :class:`PymongoCalls`, or mongomock's; ``server_time`` says
    whether :meth:`now` reads the server's clock; ``clock_skew_allowance`` is what the
    reaper adds to lease deadlines; ``started`` is set once :meth:`startup` created the
    indexes.
    """

    def __init__(
        self,
        db: Database[Any],
        collection: str,
        *,
        clock: Clock,
        server_time: bool,
        clock_skew_allowance: float | None,
        owns_client: bool,
        write_concern: WriteConcern | None = None,
    ) -> None:
        if not isinstance(collection, str) or not collection:
            raise ValueError(f"collection must be a non-empty string, got {collection!r}")
        self.db = db
        self.calls: PymongoCalls | MongomockCalls = (
            MongomockCalls() if is_mongomock(db) else PymongoCalls()
        )
        self.collection_name = collection
        self.clock = clock
        self.server_time = server_time and self.calls.server_clock
        if clock_skew_allowance is None:
            clock_skew_allowance = self.calls.skew_allowance
        self.clock_skew_allowance = float(clock_skew_allowance)
        self.owns_client = owns_client
        self.started = False
        self.col: Collection[dict[str, Any]] = db.get_collection(
            collection,
            codec_options=CodecOptions(tz_aware=True),
            write_concern=write_concern_for(self.calls.write_concern(db), write_concern),
        )
        self._offset = timedelta(0)
        self._offset_checked_at: float | None = None
        self._startup_lock = threading.Lock()

    @property
    def mock(self) -> bool:
        """Whether the store calls as on mongomock. (Tests turn it off to script a
        server's replies on a mongomock collection.)"""
        return isinstance(self.calls, MongomockCalls)

    @mock.setter
    def mock(self, mock: bool) -> None:
        self.calls = MongomockCalls() if mock else PymongoCalls()

    @property
    def lock(self) -> threading.RLock | None:
        """The lock every call holds: mongomock's, one per process; None on a server."""
        return self.calls.lock

    def side_collection(self, suffix: str) -> Collection[dict[str, Any]]:
        """The collection ``<collection>_<suffix>`` beside the jobs (``schedules``,
        ``workers``, ``rate_limits``), read and written with the jobs collection's codec
        options and write concern."""
        return self.db.get_collection(
            f"{self.collection_name}_{suffix}",
            codec_options=self.col.codec_options,
            write_concern=self.col.write_concern,
        )

    # -- plumbing -------------------------------------------------------------------------
    def call(
        self,
        operation: str,
        fn: Callable[[], R],
        *,
        retry: bool = True,
        timeout: float | None = None,
    ) -> R:
        """Run ``fn``, repeating transient errors when ``retry``; with ``timeout``, all of
        it (repeats included) within that many seconds. The seam every read and write of
        the collection goes through (the change-stream watcher included)."""
        attempt = functools.partial(self.calls.run, fn, timeout)
        attempts = RETRY_ATTEMPTS if retry else 1
        if timeout is None:
            return call_with_retries(operation, attempt, attempts=attempts)
        with self.bounded(timeout):
            return call_with_retries(operation, attempt, attempts=attempts, max_seconds=timeout)

    def bounded(self, timeout: float | None) -> AbstractContextManager[None]:
        """Bound every server round trip inside, retries included, so that the whole takes
        at most ``timeout`` seconds even while no server answers."""
        if timeout is None:
            return contextlib.nullcontext()
        return self.calls.deadline(self.db, timeout, ReadPreference.PRIMARY)

    def now(self) -> datetime:
        """The server's clock where it tells us, else this host's."""
        if self.server_time:
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
            with self.bounded(SERVER_TIME_TIMEOUT):
                reply = self.db.command("hello")
            after = self.clock.now()
        except PyMongoError as exc:
            logger.debug("could not read server time, using local clock: %s", exc)
            return
        server = reply.get("localTime")
        if isinstance(server, datetime):
            midpoint = before + (after - before) / 2
            self._offset = as_utc(server) - midpoint

    # -- startup and shutdown -------------------------------------------------------------
    def startup(self) -> None:
        """Create the indexes (idempotent)."""
        with self._startup_lock:
            if self.started:
                return
            self.call("startup", lambda: ensure_indexes(self.col, self.calls.create_indexes))
            self.started = True

    def close(self) -> None:
        """Close the client if this store opened it, without waiting for a server that is
        down: pymongo's ``close()`` first ends the client's server sessions, which waits a
        whole server selection timeout when no server answers (a worker's exit with it).
        Ending them is a courtesy (the server drops idle sessions itself), so it gets
        :data:`CLOSE_TIMEOUT`, and no wait at all when no server is known to be up."""
        if not self.owns_client:
            return
        # pymongo ends the sessions on the server it selects for primaryPreferred reads.
        with self.calls.deadline(self.db, CLOSE_TIMEOUT, ReadPreference.PRIMARY_PREFERRED):
            self.db.client.close()

    def drop(self) -> None:
        """Delete the collection (tests and the demo)."""
        self.calls.run(self.col.drop, None)
        self.started = False
