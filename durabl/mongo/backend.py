"""MongoJobQueue: the production backend. The only module family that talks to pymongo."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pymongo
from bson import ObjectId
from bson.codec_options import CodecOptions
from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError, PyMongoError

from durabl.backend import EnqueueResult, InlineClaimResult, PushListener
from durabl.clock import SYSTEM_CLOCK, Clock, as_utc
from durabl.exceptions import DedupeScopeConflictError, DurablError
from durabl.job import (
    FAILURE_KINDS,
    STATUSES,
    FailureKind,
    HeartbeatResult,
    Job,
    JobHandle,
    JobResult,
    JournalAppendResult,
    JournalRecord,
    LogEntry,
    QueueStats,
    ReapReport,
    handle_for,
)
from durabl.mongo import codec
from durabl.mongo.changestream import DEFAULT_BATCH_WINDOW, PushSettings
from durabl.mongo.codec import ACTIVE_SLOT, LEASE_FIELDS, LIVE_SLOT, PENDING_SLOT, SLOTS
from durabl.mongo.indexes import ensure_indexes
from durabl.mongo.retry import RETRY_ATTEMPTS, call_with_retries
from durabl.mongo.watcher import Watcher, open_watcher
from durabl.options import MAX_LOG_ENTRIES, PUSH_SAFETY_POLL_INTERVAL, RECEIPTS_KEPT, NewJob

logger = logging.getLogger(__name__)

R = TypeVar("R")

SERVER_TIME_REFRESH = 300.0
DEFAULT_SKEW_ALLOWANCE = 2.0
_NO_RECEIPTS = {"receipts": 0}


# mongomock is not thread-safe, and two backends may share one mongomock database: one
# process-wide lock serialises every mongomock call made by any MongoJobQueue.
_MONGOMOCK_LOCK = threading.RLock()


def is_mongomock(db: Any) -> bool:
    return type(db).__module__.split(".")[0] == "mongomock"


class MongoJobQueue:
    """Jobs in one MongoDB collection.

    ``use_change_streams`` asks for push pickup; ``startup()`` then refuses a server that
    cannot provide it (see docs/change-streams.md). While the stream is up, processors on
    the default poll interval poll every ``safety_poll_interval`` seconds; notifications
    are batched for ``push_batch_window`` seconds (``push_settings`` holds the rest).
    ``clock_skew_allowance`` (seconds) is added to every lease deadline the reaper checks,
    on top of timestamps taken from the server's clock (default 2 s on a server, 0 on
    mongomock).
    """

    supports_journal = True

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

    def __repr__(self) -> str:
        return f"MongoJobQueue(db={self.db.name!r}, collection={self.collection_name!r})"

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

    def _call(self, operation: str, fn: Callable[[], R], *, retry: bool = True) -> R:
        """Run ``fn`` under the mongomock guard; repeat transient errors when ``retry``."""

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
        now = self.clock.now() + self._offset
        # BSON keeps milliseconds: round here so what we compare is what we stored.
        return now.replace(microsecond=now.microsecond // 1000 * 1000)

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
    def startup(self) -> None:
        """Create the indexes (idempotent) and check change-stream support if asked."""
        with self._startup_lock:
            if self._started:
                return
            self._call("startup", lambda: ensure_indexes(self.col, mongomock=self._mock))
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

    def open_push(self, listener: PushListener) -> Watcher:
        """The change-stream watcher for a queue (not started): see
        :mod:`durabl.mongo.changestream`."""
        if not self.supports_push:
            raise DurablError("push pickup needs use_change_streams=True and startup()")
        return open_watcher(self, listener)

    def close(self) -> None:
        if self._owns_client:
            self.db.client.close()

    def check_size(self, job: NewJob) -> None:
        codec.check_document_size(job.type, codec.new_document(job, self.clock.now()))

    # -- enqueue --------------------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        now = self.now()
        doc = codec.new_document(job, now)
        codec.check_document_size(job.type, doc)
        if not self._insert(doc):
            return self._slot_taken(job, now)
        if job.dedupe_key is not None:
            self._check_scope_conflict(job, doc["_id"], {"status": "pending"})
        return EnqueueResult(str(doc["_id"]))

    def _insert(self, doc: dict[str, Any]) -> bool:
        """Insert; False when a dedupe slot is taken. A repeat after an ambiguous failure
        that finds its own document counts as success."""

        attempts = 0

        def insert() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                self.col.insert_one(doc)
            except DuplicateKeyError:
                # A fresh ObjectId cannot collide on a first try: the clash is a dedupe slot.
                # On a repeat, finding our own document means the first try went through.
                return (
                    attempts > 1 and self.col.find_one({"_id": doc["_id"]}, {"_id": 1}) is not None
                )
            return True

        return self._call("enqueue", insert)

    def _slot_taken(self, job: NewJob, now: datetime) -> EnqueueResult:
        if job.coalesce != "latest" or job.dedupe_key is None:
            return EnqueueResult(None)
        slot = codec.pending_slot(job.dedupe_scope)

        def replace() -> bool:
            result = self.col.update_one(
                {slot: job.dedupe_key, "status": "pending", "type": job.type},
                {"$set": {"data": job.data, "updated_at": now}},
            )
            return result.matched_count == 1

        return EnqueueResult(None, coalesced=self._call("coalesce", replace))

    def _check_scope_conflict(
        self, job: NewJob, own_id: ObjectId, own_filter: Mapping[str, Any]
    ) -> None:
        """Both racers of a cross-scope pair see each other after inserting and back out."""
        assert job.dedupe_key is not None
        others = [{slot: job.dedupe_key} for slot in codec.other_scope_slots(job.dedupe_scope)]

        def find() -> dict[str, Any] | None:
            return self.col.find_one({"$or": others, "_id": {"$ne": own_id}}, {"dedupe_scope": 1})

        other = self._call("dedupe scope check", find)
        if other is None:
            return
        removed = self._call(
            "dedupe scope back-out",
            lambda: self.col.delete_one({"_id": own_id, **own_filter}).deleted_count,
        )
        if not removed:
            logger.warning(
                "job %s was claimed before its dedupe scope conflict could be backed out",
                own_id,
                extra={"job_id": str(own_id), "type": job.type},
            )
            return
        raise DedupeScopeConflictError(
            job.dedupe_key, job.dedupe_scope, other.get("dedupe_scope") or "unknown"
        )

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        now = self.now()
        if job.dedupe_key is not None and job.dedupe_scope == "pending":
            # The pending slot decides: a pending follower already covers the work.
            enq = self.enqueue(job)
            if enq.job_id is None:
                return InlineClaimResult(None, None, enq.coalesced)
            handle, blocked = self._claim_one(
                {"_id": ObjectId(enq.job_id), "status": "pending"}, now, lease_owner
            )
            if handle is None:
                return InlineClaimResult(None, enq.job_id if blocked else None)
            return InlineClaimResult(handle)
        doc = codec.new_document(job, now)
        codec.check_document_size(job.type, doc)
        token = self._new_token()
        doc.update(
            status="active",
            attempts=1,
            claim_token=token,
            claimed_at=now,
            heartbeat_at=now,
            lease_owner=lease_owner,
        )
        if not self._insert(doc):
            return InlineClaimResult(None, None, self._slot_taken(job, now).coalesced)
        if job.dedupe_key is not None:
            self._check_scope_conflict(job, doc["_id"], {"claim_token": token})
        # Build the handle from what the store holds (lists for tuples, milliseconds), not
        # from the caller's objects.
        return InlineClaimResult(handle_for(codec.to_job(codec.round_trip(doc)), token, self))

    # -- claiming -------------------------------------------------------------------------
    @staticmethod
    def _new_token() -> str:
        return uuid.uuid4().hex

    def _claim_update(self, now: datetime, token: str, owner: str) -> dict[str, Any]:
        return {
            "$set": {
                "status": "active",
                "claim_token": token,
                "claimed_at": now,
                "heartbeat_at": now,
                "updated_at": now,
                "lease_owner": owner,
            },
            "$inc": {"attempts": 1},
            "$rename": {PENDING_SLOT: ACTIVE_SLOT},
        }

    def _claim_one(
        self, query: Mapping[str, Any], now: datetime, owner: str
    ) -> tuple[JobHandle[Any] | None, bool]:
        """One atomic claim. Returns (handle, blocked): blocked means the candidate is a
        ``pending``-scope follower whose key already has an active run."""
        token = self._new_token()

        def claim() -> tuple[JobHandle[Any] | None, bool]:
            try:
                doc = self.col.find_one_and_update(
                    query,
                    self._claim_update(now, token, owner),
                    sort=[("priority", 1), ("run_at", 1), ("_id", 1)],
                    projection=_NO_RECEIPTS,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                return None, True
            if doc is None:
                return None, False
            return handle_for(codec.to_job(doc), token, self), False

        # Not repeated on transient errors: a claim that applied but whose reply was lost
        # would claim a second job; the lost one comes back through the reaper.
        return self._call("claim", claim, retry=False)

    def claim(self, type: str, *, limit: int = 1, lease_owner: str = "") -> list[JobHandle[Any]]:
        now = self.now()
        claimed: list[JobHandle[Any]] = []
        skipped: list[ObjectId] = []
        while len(claimed) < limit:
            query: dict[str, Any] = {"status": "pending", "type": type, "run_at": {"$lte": now}}
            if skipped:
                query["_id"] = {"$nin": skipped}
            handle, blocked = self._claim_one(query, now, lease_owner)
            if handle is not None:
                claimed.append(handle)
                continue
            if not blocked:
                break
            skipped.append(self._blocked_candidate(query))
        return claimed

    def _blocked_candidate(self, query: Mapping[str, Any]) -> ObjectId:
        """The job a claim just failed on (the first candidate in claim order)."""

        def find() -> ObjectId:
            doc = self.col.find_one(
                query, {"_id": 1}, sort=[("priority", 1), ("run_at", 1), ("_id", 1)]
            )
            return doc["_id"] if doc else ObjectId()

        return self._call("claim", find)

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        now = self.now()
        query = {
            "$or": [{PENDING_SLOT: dedupe_key}, {LIVE_SLOT: dedupe_key}],
            "status": "pending",
            "type": type,
            "run_at": {"$lte": now},
        }
        handle, _ = self._claim_one(query, now, lease_owner)
        return handle

    # -- fenced writes --------------------------------------------------------------------
    def _push_logs(self, update: dict[str, Any], logs: Sequence[LogEntry]) -> None:
        if logs:
            update.setdefault("$push", {})["logs"] = {
                "$each": codec.log_documents(logs),
                "$slice": -MAX_LOG_ENTRIES,
            }

    def _receipt(self, update: dict[str, Any], token: str, op: str, result: str) -> None:
        update.setdefault("$push", {})["receipts"] = {
            "$each": [{"t": token, "op": op, "r": result}],
            "$slice": -RECEIPTS_KEPT,
        }

    def _resolve_miss(self, job_id: ObjectId, token: str, op: str) -> JobResult:
        """Why a fenced write matched nothing: its own earlier result, a terminal job, a
        lost lease, or no job at all."""
        doc = self.col.find_one({"_id": job_id}, {"status": 1, "receipts": 1})
        if doc is None:
            return JobResult("not-found")
        for receipt in doc.get("receipts") or ():
            if receipt.get("t") == token and receipt.get("op") == op:
                return JobResult(receipt["r"])
        if doc["status"] in ("completed", "failed", "superseded"):
            return JobResult("already-terminal", doc["status"])
        return JobResult("lease-lost")

    def _fenced(
        self,
        job_id: str,
        token: str,
        op: str,
        result: str,
        update: dict[str, Any],
        logs: Sequence[LogEntry],
        *,
        on_duplicate: Callable[[ObjectId], JobResult] | None = None,
        timeout: float | None = None,
    ) -> JobResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        self._push_logs(update, logs)
        self._receipt(update, token, op, result)

        def write() -> JobResult:
            try:
                res = self.col.update_one(
                    {"_id": oid, "claim_token": token, "status": "active"}, update
                )
            except DuplicateKeyError:
                if on_duplicate is None:
                    raise
                return on_duplicate(oid)
            if res.matched_count == 1:
                return JobResult(result)  # type: ignore[arg-type]
            return self._resolve_miss(oid, token, op)

        def guarded() -> JobResult:
            with self._guard(timeout):
                return write()

        if timeout is None:
            return call_with_retries(op, guarded)
        with self._bounded(timeout):
            return call_with_retries(op, guarded, max_seconds=timeout)

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> HeartbeatResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return "lease-lost"
        update: dict[str, Any] = {"$set": {"heartbeat_at": self.now()}}
        self._push_logs(update, logs)

        def beat() -> HeartbeatResult:
            res = self.col.update_one(
                {"_id": oid, "claim_token": token, "status": "active"}, update
            )
            return "applied" if res.matched_count == 1 else "lease-lost"

        return self._call("heartbeat", beat)

    def _terminal_update(self, status: str, now: datetime, **fields: Any) -> dict[str, Any]:
        return {
            "$set": {"status": status, "updated_at": now, "finished_at": now, **fields},
            "$unset": {name: "" for name in (*SLOTS, *LEASE_FIELDS)},
        }

    def complete(self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()) -> JobResult:
        update = self._terminal_update("completed", self.now())
        return self._fenced(job_id, token, "complete", "completed", update, logs)

    def fail_fatal(
        self, job_id: str, token: str, reason: str, *, logs: Sequence[LogEntry] = ()
    ) -> JobResult:
        update = self._terminal_update(
            "failed", self.now(), fail_reason=codec.clip_reason(reason), failure_kind="fatal"
        )
        return self._fenced(job_id, token, "fail-fatal", "failed-terminal", update, logs)

    def fail(
        self,
        job_id: str,
        token: str,
        reason: str,
        *,
        retry_at: datetime,
        logs: Sequence[LogEntry] = (),
    ) -> JobResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        now = self.now()
        reason = codec.clip_reason(reason)
        doc = self._call(
            "fail",
            lambda: self.col.find_one(
                {"_id": oid, "claim_token": token, "status": "active"},
                {"attempts": 1, "max_attempts": 1},
            ),
        )
        if doc is None:
            return self._call("fail", lambda: self._resolve_miss(oid, token, "fail"))
        if doc["attempts"] >= doc["max_attempts"]:
            update = self._terminal_update(
                "failed", now, fail_reason=reason, failure_kind="retries-exhausted"
            )
            return self._fenced(job_id, token, "fail", "failed-terminal", update, logs)
        update = self._back_to_pending(now, run_at=retry_at, fail_reason=reason)
        return self._fenced(
            job_id,
            token,
            "fail",
            "retry-scheduled",
            update,
            logs,
            on_duplicate=lambda oid: self._supersede(
                oid, token, "fail", now, logs, fail_reason=reason
            ),
        )

    def _back_to_pending(self, now: datetime, **fields: Any) -> dict[str, Any]:
        return {
            "$set": {"status": "pending", "updated_at": now, **fields},
            "$unset": {name: "" for name in LEASE_FIELDS},
            "$rename": {ACTIVE_SLOT: PENDING_SLOT},
        }

    def _supersede(
        self,
        oid: ObjectId,
        token: str,
        op: str,
        now: datetime,
        logs: Sequence[LogEntry],
        **fields: Any,
    ) -> JobResult:
        """A pending follower already holds the key: it covers this job's work."""
        update = self._terminal_update("superseded", now, **fields)
        self._push_logs(update, logs)
        self._receipt(update, token, op, "superseded")
        res = self.col.update_one({"_id": oid, "claim_token": token, "status": "active"}, update)
        if res.matched_count == 1:
            return JobResult("superseded")
        return self._resolve_miss(oid, token, op)

    def release(
        self,
        job_id: str,
        token: str,
        *,
        logs: Sequence[LogEntry] = (),
        timeout: float | None = None,
        run_at: datetime | None = None,
    ) -> JobResult:
        now = self.now()
        update = (
            self._back_to_pending(now)
            if run_at is None
            else self._back_to_pending(now, run_at=run_at)
        )
        update["$inc"] = {"attempts": -1}
        return self._fenced(
            job_id,
            token,
            "release",
            "released",
            update,
            logs,
            on_duplicate=lambda oid: self._supersede(oid, token, "release", now, logs),
            timeout=timeout,
        )

    def append_journal(
        self, job_id: str, token: str, records: Sequence[JournalRecord], *, position: int
    ) -> JournalAppendResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return "lease-lost"
        fence: dict[str, Any] = {"_id": oid, "claim_token": token, "status": "active"}
        # The journal must hold exactly ``position`` entries: a repeat of an append whose
        # reply was lost misses here instead of appending twice.
        query: dict[str, Any] = {**fence, f"journal.{position}": {"$exists": False}}
        if position > 0:
            query[f"journal.{position - 1}"] = {"$exists": True}
        update = {"$push": {"journal": {"$each": [dict(r) for r in records]}}}
        last = position + len(records) - 1

        def write() -> JournalAppendResult:
            if self.col.update_one(query, update).matched_count == 1:
                return "applied"
            # Only the claim holder appends: entries past ``position`` are this append.
            repeat = {**fence, f"journal.{last}": {"$exists": True}}
            return "applied" if self.col.find_one(repeat, {"_id": 1}) else "lease-lost"

        return self._call("append_journal", write)

    # -- recovery -------------------------------------------------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> ReapReport:
        now = self.now()
        cutoff = now - timedelta(seconds=visibility_timeout + self.clock_skew_allowance)
        stuck = self._call(
            "reap",
            lambda: list(
                self.col.find(
                    {"status": "active", "heartbeat_at": {"$lt": cutoff}},
                    {"claim_token": 1, "attempts": 1, "max_attempts": 1, "type": 1},
                )
                .sort("heartbeat_at", 1)
                .limit(limit)
            ),
        )
        recovered = stalled = superseded = 0
        ids: list[str] = []
        for doc in stuck:
            outcome = self._reap_one(doc, cutoff, now)
            if outcome is None:
                continue
            ids.append(str(doc["_id"]))
            if outcome == "stalled":
                stalled += 1
            elif outcome == "superseded":
                superseded += 1
            else:
                recovered += 1
        return ReapReport(recovered, stalled, superseded, len(stuck) >= limit, tuple(ids))

    def _reap_one(self, doc: Mapping[str, Any], cutoff: datetime, now: datetime) -> str | None:
        query = {
            "_id": doc["_id"],
            "status": "active",
            "claim_token": doc.get("claim_token"),
            "heartbeat_at": {"$lt": cutoff},
        }
        if doc["attempts"] >= doc["max_attempts"]:
            update = self._terminal_update(
                "failed",
                now,
                failure_kind="stalled",
                fail_reason="lease expired: the worker stopped heartbeating (crashed or hung)",
            )
            outcome = "stalled"
        else:
            update = self._back_to_pending(now, run_at=now)
            outcome = "recovered"

        def write() -> str | None:
            try:
                res = self.col.update_one(query, update)
            except DuplicateKeyError:
                res = self.col.update_one(query, self._terminal_update("superseded", now))
                return "superseded" if res.matched_count else None
            return outcome if res.matched_count else None

        return self._call("reap", write)

    def recover_stuck_jobs(self, visibility_timeout: float) -> int:
        total = 0
        while True:
            report = self.reap(visibility_timeout)
            total += report.handled
            if not report.saturated or not report.handled:
                return total

    # -- queries and operations -----------------------------------------------------------
    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        query = {"type": type, "$or": [{slot: dedupe_key} for slot in SLOTS]}
        return (
            self._call("has_outstanding", lambda: self.col.find_one(query, {"_id": 1})) is not None
        )

    def get_job(self, job_id: str) -> Job[Any] | None:
        oid = codec.parse_id(job_id)
        if oid is None:
            return None
        doc = self._call("get_job", lambda: self.col.find_one({"_id": oid}, _NO_RECEIPTS))
        return codec.to_job(doc) if doc else None

    def _list_query(
        self,
        status: str | None,
        type: str | None,
        failure_kind: str | None,
        search: str | None,
    ) -> dict[str, Any]:
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        if failure_kind is not None and failure_kind not in FAILURE_KINDS:
            raise ValueError(f"failure_kind must be one of {FAILURE_KINDS}, got {failure_kind!r}")
        query: dict[str, Any] = {}
        if status is not None:
            query["status"] = status
        if type is not None:
            query["type"] = type
        if failure_kind is not None:
            query["failure_kind"] = failure_kind
        if search:
            terms: list[dict[str, Any]] = [
                {"dedupe_key": {"$regex": "^" + re.escape(search)}},
            ]
            oid = codec.parse_id(search)
            if oid is not None:
                terms.append({"_id": oid})
            query["$or"] = terms
        return query

    def list_jobs(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        failure_kind: FailureKind | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Job[Any]]:
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset must not be negative")
        query = self._list_query(status, type, failure_kind, search)
        order = [("finished_at", -1), ("_id", -1)] if status == "failed" else [("_id", -1)]

        def fetch() -> list[Job[Any]]:
            cursor = self.col.find(query, _NO_RECEIPTS).sort(order).skip(offset).limit(limit)
            return [codec.to_job(doc) for doc in cursor]

        return self._call("list_jobs", fetch)

    def count_jobs(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        failure_kind: FailureKind | None = None,
        search: str | None = None,
    ) -> int:
        query = self._list_query(status, type, failure_kind, search)
        return self._call("count_jobs", lambda: self.col.count_documents(query))

    def retry(self, job_id: str) -> bool:
        oid = codec.parse_id(job_id)
        if oid is None:
            return False
        now = self.now()

        def write() -> bool:
            doc = self.col.find_one(
                {"_id": oid, "status": "failed"}, {"dedupe_key": 1, "dedupe_scope": 1}
            )
            if doc is None:
                return False
            fields: dict[str, Any] = {
                "status": "pending",
                "attempts": 0,
                "run_at": now,
                "updated_at": now,
            }
            key = doc.get("dedupe_key")
            if key is not None:
                scope = doc.get("dedupe_scope") or "pending+active"
                others = [{slot: key} for slot in codec.other_scope_slots(scope)]
                if self.col.find_one({"$or": others}, {"_id": 1}) is not None:
                    return False  # the key is live under the other scope
                fields[codec.pending_slot(scope)] = key
            try:
                res = self.col.update_one(
                    {"_id": oid, "status": "failed"},
                    {"$set": fields, "$unset": {"failure_kind": "", "finished_at": ""}},
                )
            except DuplicateKeyError:
                return False
            return res.modified_count == 1

        # Not repeated: a retry that applied but lost its reply would report False.
        return self._call("retry", write, retry=False)

    def delete(self, job_id: str) -> bool:
        oid = codec.parse_id(job_id)
        if oid is None:
            return False
        return bool(
            self._call(
                "delete",
                lambda: (
                    self.col.delete_one({"_id": oid, "status": {"$ne": "active"}}).deleted_count
                ),
            )
        )

    def get_stats(self, type: str | None = None) -> QueueStats:
        now = self.now()
        base: dict[str, Any] = {} if type is None else {"type": type}

        def read() -> QueueStats:
            counts = {s: self.col.count_documents({**base, "status": s}) for s in STATUSES}
            by_kind: dict[str, int] = {
                kind: n
                for kind in FAILURE_KINDS
                if (
                    n := self.col.count_documents(
                        {**base, "status": "failed", "failure_kind": kind}
                    )
                )
            }
            oldest = self.col.find_one(
                {**base, "status": "pending", "run_at": {"$lte": now}},
                {"run_at": 1},
                sort=[("run_at", 1)],
            )
            oldest_at = as_utc(oldest["run_at"]) if oldest else None
            lag = max((now - oldest_at).total_seconds(), 0.0) if oldest_at else 0.0
            return QueueStats(
                pending=counts["pending"],
                active=counts["active"],
                completed=counts["completed"],
                failed=counts["failed"],
                superseded=counts["superseded"],
                oldest_pending_run_at=oldest_at,
                oldest_pending_lag=lag,
                failed_by_kind=by_kind,
            )

        return self._call("get_stats", read)

    def job_types(self) -> list[str]:
        return sorted(self._call("job_types", lambda: self.col.distinct("type")))

    def drop(self) -> None:
        """Delete the collection (tests and the demo)."""
        with self._guard():
            self.col.drop()
        self._started = False
