"""MongoJobQueue: the production backend. The only module family that talks to pymongo.

A MongoJobQueue owns its parts and delegates to them: a
:class:`~durabl.stores.mongo.store.MongoStore` (the collection, the mongomock guard,
retries, the server clock, startup), a :class:`~durabl.stores.mongo.queries.MongoQueries`
(the operator queries) and a :class:`~durabl.stores.mongo.reaper.MongoReaper`. This module
holds what runs under a claim: enqueue, claim, fenced writes, the journal and push pickup;
:mod:`durabl.stores.mongo.bulk` builds ``complete_many``'s bulk write.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError
from pymongo.write_concern import WriteConcern

from durabl.model import activity
from durabl.model import job as model
from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import (
    BackendUnavailableError,
    DedupeScopeConflictError,
    DurablError,
)
from durabl.model.flow import LimitedTypes, RateLimit
from durabl.model.job import Job, JobFilter, JobHandle, JobResult, LogEntry, handle_for
from durabl.model.options import (
    MAX_LOG_ENTRIES,
    PUSH_SAFETY_POLL_INTERVAL,
    RECEIPTS_KEPT,
    NewJob,
)
from durabl.model.rules import (
    JobPage,
    created_claimed,
    enqueues_before_inline_run,
    resolve_miss,
)
from durabl.stores import base, push
from durabl.stores.base import EnqueueResult, InlineClaimResult, StoreBase
from durabl.stores.mongo import cancel, codec, factory, flow, indexes
from durabl.stores.mongo.attempts import (
    CLAIM_FIELDS,
    ClaimInfo,
    ClaimMemo,
    attempt_document,
    claim_info,
    push_attempt,
)
from durabl.stores.mongo.bulk import FencedBatch
from durabl.stores.mongo.changestream import DEFAULT_BATCH_WINDOW, PushSettings
from durabl.stores.mongo.codec import ACTIVE_SLOT, LIVE_SLOT, PENDING_SLOT
from durabl.stores.mongo.queries import MongoQueries
from durabl.stores.mongo.reaper import MongoReaper
from durabl.stores.mongo.retry import call_with_retries
from durabl.stores.mongo.schedules import MongoSchedules
from durabl.stores.mongo.store import NO_RECEIPTS, MongoStore, is_mongomock
from durabl.stores.mongo.watcher import Watcher, open_watcher
from durabl.stores.mongo.workers import MongoWorkers

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What the read after a fenced write that matched nothing needs (see ``_miss_read``).
MISS_FIELDS = {"status": 1, "receipts": 1, "claim_token": 1, "cancel_requested": 1}


class _OnStore(Generic[T]):
    """An attribute of a :class:`MongoJobQueue` that is its store's (read and written
    there), so the queue's parts and its callers see one value."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, queue: None, owner: type[Any]) -> _OnStore[T]: ...

    @overload
    def __get__(self, queue: MongoJobQueue, owner: type[Any]) -> T: ...

    def __get__(self, queue: MongoJobQueue | None, owner: type[Any]) -> _OnStore[T] | T:
        if queue is None:
            return self
        value: T = getattr(queue.store, self.name)
        return value

    def __set__(self, queue: MongoJobQueue, value: T) -> None:
        setattr(queue.store, self.name, value)


class MongoJobQueue(StoreBase):
    """Jobs in one MongoDB collection.

    ``use_change_streams`` asks for push pickup; ``startup()`` then refuses a server that
    cannot provide it (see docs/change-streams.md). While the stream is up, processors on
    the default poll interval poll every ``safety_poll_interval`` seconds; notifications
    are batched for ``push_batch_window`` seconds (``push_settings`` holds the rest).
    ``clock_skew_allowance`` (seconds) is added to every lease deadline the reaper checks,
    on top of timestamps taken from the server's clock (default 2 s on a server, 0 on
    mongomock). ``write_concern`` is what every write waits for: by default the database's
    own if its client or URL set one, else majority and journaled (docs/operations.md).
    """

    supports_journal = True
    supports_schedules = True
    supports_workers = True
    schedules: MongoSchedules
    workers: MongoWorkers
    db = _OnStore[Database[Any]]()
    col = _OnStore[Collection[dict[str, Any]]]()
    collection_name = _OnStore[str]()
    clock = _OnStore[Clock]()
    clock_skew_allowance = _OnStore[float]()
    supports_push = _OnStore[bool]()

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
        write_concern: WriteConcern | None = None,
    ) -> None:
        self.store = MongoStore(
            db,
            collection,
            clock=clock or SYSTEM_CLOCK,
            server_time=server_time and not is_mongomock(db) and clock is None,
            clock_skew_allowance=clock_skew_allowance,
            owns_client=owns_client,
            write_concern=write_concern,
        )
        self.use_change_streams = use_change_streams
        self.safety_poll_interval = push.safety_poll_interval(safety_poll_interval)
        self.push_settings = PushSettings(batch_window=push_batch_window)
        self.queries = MongoQueries(self.store)
        self._claims = ClaimMemo()
        self.reaper = MongoReaper(self.store)
        self.schedules = MongoSchedules(self.store)
        self.workers = MongoWorkers(self.store)
        self._rates = flow.rates_collection(self.store.col, self.store.collection_name)
        #: The types with a rate limit: a claim of another type reads no window.
        self._limited = LimitedTypes(self.store.clock.monotonic)
        #: Whether this store object has met a job with a concurrency key: until then a
        #: claim skips the per-key count (see :meth:`_key_usage`).
        self._keys_seen = False

    def __repr__(self) -> str:
        return f"MongoJobQueue(db={self.db.name!r}, collection={self.collection_name!r})"

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MongoJobQueue:
        """A store for ``mongodb://host/db``, ``mongodb+srv://...`` or ``mongomock://[/db]``
        (one shared in-process mongomock client). Options: ``database``, ``collection``,
        ``use_change_streams``, ``clock_skew_allowance``, ``write_concern``,
        ``connect_timeout`` (seconds to reach the server, for every store), and pymongo
        client options (``connect=False`` by default: nothing connects here)."""
        return factory.from_url(cls, url, **options)

    # -- the store's plumbing -------------------------------------------------------------
    def now(self) -> datetime:
        """The server's clock where it tells us, else this host's."""
        return self.store.now()

    def startup(self) -> None:
        """Create the indexes (idempotent), check change-stream support if asked, and read
        which types have a rate limit (unless read lately)."""
        self.store.startup(change_streams=self.use_change_streams)
        self._limited.refresh(self._limited_types)

    def pending_setup(self) -> tuple[str, ...]:
        """The indexes ``startup()`` would create (none are created here)."""
        col = self.store.col
        return tuple(self.store.call("pending_setup", lambda: indexes.missing_indexes(col)))

    def close(self) -> None:
        self.store.close()

    def delete_worker(self, worker_id: str) -> bool:
        # A queue's last write as it stops or its process exits: bounded, whatever the URL's
        # server selection timeout, so a server that is down does not hold the exit up.
        with self.store.bounded(self.store.registry_removal_timeout):
            return self.workers.delete(worker_id)

    def drop(self) -> None:
        """Delete the collection (tests and the demo)."""
        self.store.drop()

    # -- push and size --------------------------------------------------------------------
    def push_unavailable(self) -> str | None:
        if not self.use_change_streams:
            return "change streams are off (use_change_streams=False)"
        if not self.supports_push:
            return "push pickup is not verified yet (the store's startup() has not run)"
        return None

    def open_push(self, listener: base.PushListener) -> Watcher:
        """The change-stream watcher for a queue (not started): see
        :mod:`durabl.stores.mongo.changestream`."""
        if not self.supports_push:
            raise DurablError("push pickup needs use_change_streams=True and startup()")
        return open_watcher(self.store, listener, self.push_settings)

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
        """Insert; False when a dedupe slot is taken. An insert that finds its own document
        counts as success."""

        def insert() -> bool:
            try:
                self.store.col.insert_one(doc)
            except DuplicateKeyError:
                # A fresh ObjectId collides only with this insert's own earlier write, which
                # even pymongo's retry inside one try meets (a restarted primary forgets the
                # retryable write): only with no document of our _id is the clash a slot.
                return self.store.col.find_one({"_id": doc["_id"]}, {"_id": 1}) is not None
            return True

        return self.store.call("enqueue", insert)

    def _slot_taken(self, job: NewJob, now: datetime) -> EnqueueResult:
        if job.coalesce != "latest" or job.dedupe_key is None:
            return EnqueueResult(None)
        slot = codec.pending_slot(job.dedupe_scope)

        def replace() -> bool:
            result = self.store.col.update_one(
                {slot: job.dedupe_key, "status": "pending", "type": job.type},
                {"$set": {"data": job.data, "updated_at": now}},
            )
            return result.matched_count == 1

        return EnqueueResult(None, coalesced=self.store.call("coalesce", replace))

    def _check_scope_conflict(
        self, job: NewJob, own_id: ObjectId, own_filter: Mapping[str, Any]
    ) -> None:
        """Both racers of a cross-scope pair see each other after inserting and back out."""
        assert job.dedupe_key is not None
        others = [{slot: job.dedupe_key} for slot in codec.other_scope_slots(job.dedupe_scope)]

        def find() -> dict[str, Any] | None:
            return self.store.col.find_one(
                {"$or": others, "_id": {"$ne": own_id}}, {"dedupe_scope": 1}
            )

        other = self.store.call("dedupe scope check", find)
        if other is None:
            return
        removed = self.store.call(
            "dedupe scope back-out",
            lambda: self.store.col.delete_one({"_id": own_id, **own_filter}).deleted_count,
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
        if enqueues_before_inline_run(job):
            # The pending slot decides: a pending follower already covers the work. A job
            # with a concurrency key is claimed only while its key has room.
            enq = self.enqueue(job)
            if enq.job_id is None:
                return InlineClaimResult(None, None, enq.coalesced)
            usage = self._key_usage()
            handle, blocked = self._claim_one(
                flow.with_room({"_id": ObjectId(enq.job_id), "status": "pending"}, usage),
                now,
                lease_owner,
                usage=usage,
            )
            blocked = blocked or (handle is None and job.concurrency_key is not None)
            if handle is None:
                return InlineClaimResult(None, enq.job_id if blocked else None)
            return InlineClaimResult(handle)
        doc = codec.new_document(job, now)
        codec.check_document_size(job.type, doc)
        token = self._new_token()
        doc.update(created_claimed(token, now, lease_owner))
        if not self._insert(doc):
            return InlineClaimResult(None, None, self._slot_taken(job, now).coalesced)
        if job.dedupe_key is not None:
            self._check_scope_conflict(job, doc["_id"], {"claim_token": token})
        self._claims.remember(token, doc)
        # Build the handle from what the store holds (lists for tuples, milliseconds), not
        # from the caller's objects.
        return InlineClaimResult(handle_for(codec.to_job(codec.round_trip(doc)), token, self))

    # -- claiming -------------------------------------------------------------------------
    @staticmethod
    def _new_token() -> str:
        return uuid.uuid4().hex

    def _claim_update(
        self, now: datetime, token: str, owner: str, reserve: bool = False
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "status": "active",
            "claim_token": token,
            "claimed_at": now,
            "heartbeat_at": now,
            "updated_at": now,
            "lease_owner": owner,
        }
        if reserve:
            fields["reserved"] = True
        return {
            "$set": fields,
            "$inc": {"attempts": 1},
            "$rename": {PENDING_SLOT: ACTIVE_SLOT},
            # A key's slot is taken afresh (durabl.stores.mongo.flow): the one a job held in
            # an earlier run may be another's now.
            "$unset": {flow.SLOT: ""},
        }

    def _claim_one(
        self,
        query: Mapping[str, Any],
        now: datetime,
        owner: str,
        reserve: bool = False,
        usage: flow.KeyUsage | None = None,
    ) -> tuple[JobHandle[Any] | None, bool]:
        """One atomic claim. Returns (handle, blocked): blocked means the candidate is a
        ``pending``-scope follower whose key already has an active run, or a job whose
        concurrency key had no slot left (``usage``: see :mod:`durabl.stores.mongo.flow`)."""
        token = self._new_token()
        col = self.store.col

        def claim() -> tuple[JobHandle[Any] | None, bool]:
            try:
                doc = self.store.col.find_one_and_update(
                    query,
                    self._claim_update(now, token, owner, reserve),
                    sort=[("priority", 1), ("run_at", 1), ("_id", 1)],
                    projection=NO_RECEIPTS,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                return None, True
            if doc is None:
                return None, False
            return settle(doc)

        def settle(doc: dict[str, Any]) -> tuple[JobHandle[Any] | None, bool]:
            """Hand out a job this claim holds once its key (if any) has a slot."""
            keyed = doc.get(flow.KEY) is not None
            self._keys_seen = self._keys_seen or keyed
            needs_slot = keyed and doc.get(flow.SLOT) is None
            if needs_slot and not flow.take_slot(col, doc, token, usage or flow.KeyUsage()):
                flow.unclaim(col, doc["_id"], token, now)  # the key had no room
                return None, True
            self._claims.remember(token, doc)
            return handle_for(codec.to_job(doc), token, self), False

        # Not repeated on transient errors: a claim that applied but whose reply was lost
        # would claim a second job (the driver's own retry repeats the same write, which the
        # server answers from its record).
        try:
            return self.store.call("claim", claim, retry=False)
        except BackendUnavailableError:
            # The token is this claim's alone: one read (on the lease index) finds the job
            # it took if it applied, which would otherwise wait a whole lease for the reaper.
            def taken() -> dict[str, Any] | None:
                fence = {"status": "active", "heartbeat_at": now, "claim_token": token}
                return self.store.col.find_one(fence, NO_RECEIPTS)

            doc = self.store.call("claim", taken)
            if doc is None:
                raise
            # The lost reply may have come from the slot's write: a keyed job found without
            # its slot takes one now (or goes back), like a claim that met no fault.
            return self.store.call("claim", lambda: settle(doc))

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        now = self.now()
        rate = self._allowance(type, now)
        if rate is not None:
            limit = min(limit, rate[1])
            if not limit:
                return []  # the window is full: a read, nothing written, until the next one
        usage = self._key_usage()
        claimed: list[JobHandle[Any]] = []
        skipped: list[ObjectId] = []
        while len(claimed) < limit:
            query: dict[str, Any] = {"status": "pending", "type": type, "run_at": {"$lte": now}}
            if skipped:
                query["_id"] = {"$nin": skipped}
            query = flow.with_room(query, usage)
            reserve = starting is not None and len(claimed) >= starting
            try:
                handle, blocked = self._claim_one(query, now, lease_owner, reserve, usage)
            except DurablError as exc:
                if not claimed:
                    raise
                # The jobs already claimed are held: hand them over rather than strand them
                # for a lease; the next claim meets the error again if it lasts.
                logger.warning("claim of %s stopped after %d jobs: %s", type, len(claimed), exc)
                break
            if handle is not None:
                claimed.append(handle)
                continue
            if not blocked:
                break
            skipped.append(self._blocked_candidate(query))
        if rate is not None and claimed:
            claimed = self._count_starts(type, now, claimed)
        return claimed

    # -- flow control (durabl.stores.mongo.flow) ----------------------------------------
    def _allowance(self, type: str, now: datetime) -> tuple[RateLimit, int] | None:
        """The rate limit of ``type`` and what is left of its window; no read at all for a
        type this store object knows has no limit (see :class:`LimitedTypes`)."""
        rates = self._rates
        if not self._limited.has_limit(type, self._limited_types):
            return None
        left = self.store.call("claim", lambda: flow.allowance(rates, type, now))
        if left is None:
            self._limited.note(type, False)  # removed by another process
        return left

    def _key_usage(self) -> flow.KeyUsage:
        """The active jobs of each key, read once per claim, but only once this store object
        has claimed a job with a key: before that, no job is left out of the query, and the
        slot index alone keeps a key to its limit (a job of a full key claimed then is
        handed back at once, inside the claim, which also turns the count on). So stores
        whose jobs use no keys pay nothing per claim."""
        if not self._keys_seen:
            return flow.KeyUsage()
        return self.store.call("claim", lambda: flow.KeyUsage.read(self.store.col))

    def _count_starts(
        self, type: str, now: datetime, claimed: list[JobHandle[Any]]
    ) -> list[JobHandle[Any]]:
        """Count the claims in the type's window; hand back any that a racing claimer
        left no room for (their handlers never start)."""
        fits = self.store.call(
            "claim", lambda: flow.count_starts(self._rates, type, now, len(claimed))
        )
        col = self.store.col
        over = [(ObjectId(h.id), h.claim_token) for h in claimed[fits:]]

        def hand_back() -> None:
            for job_id, token in over:
                flow.unclaim(col, job_id, token, now)

        if over:
            self.store.call("claim", hand_back)
        return claimed[:fits]

    def _limited_types(self) -> list[str]:
        return self.store.call("claim", lambda: flow.limited_types(self._rates))

    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        self.store.call("set_rate_limit", lambda: flow.write_rate(self._rates, type, rate))
        self._limited.note(type, rate is not None)

    def read_rate_limit(self, type: str) -> RateLimit | None:
        return self.store.call("get_rate_limit", lambda: flow.read_rate(self._rates, type))

    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        if not claims:
            return
        tokens = [token for _, token in claims]  # random per claim: the token alone fences
        self.store.call(
            "mark_started",
            lambda: self.store.col.update_many(
                {"status": "active", "claim_token": {"$in": tokens}},
                {"$unset": {"reserved": ""}},
            ),
        )

    def _blocked_candidate(self, query: Mapping[str, Any]) -> ObjectId:
        """The job a claim just failed on (the first candidate in claim order)."""

        def find() -> ObjectId:
            doc = self.store.col.find_one(
                query, {"_id": 1}, sort=[("priority", 1), ("run_at", 1), ("_id", 1)]
            )
            return doc["_id"] if doc else ObjectId()

        return self.store.call("claim", find)

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
        usage = self._key_usage()
        handle, _ = self._claim_one(flow.with_room(query, usage), now, lease_owner, usage=usage)
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
        return self._resolution(self._miss_read(job_id), token, op)

    def _miss_read(self, job_id: ObjectId) -> dict[str, Any] | None:
        """The one read a fenced write that matched nothing makes: what decides the miss,
        and whether the claim it was fenced on has a cancellation requested."""
        return self.store.col.find_one({"_id": job_id}, MISS_FIELDS)

    @staticmethod
    def _resolution(doc: dict[str, Any] | None, token: str, op: str) -> JobResult:
        if doc is None:
            return resolve_miss(None, None)
        receipts = doc.get("receipts") or ()
        mine = (r["r"] for r in receipts if r.get("t") == token and r.get("op") == op)
        return resolve_miss(doc["status"], next(mine, None))

    def _claim_info(self, oid: ObjectId, token: str) -> ClaimInfo | None:
        """What the history entry of the claim ``token`` needs: remembered from the claim,
        else (a claim another backend object made) read; None when it is not held."""
        claim = self._claims.take(token)
        if claim is not None:
            return claim
        doc = self.store.call(
            "claim-info",
            lambda: self.store.col.find_one(
                {"_id": oid, "claim_token": token, "status": "active"}, CLAIM_FIELDS
            ),
        )
        return None if doc is None else claim_info(doc)

    def _fenced(
        self,
        job_id: str,
        token: str,
        op: str,
        result: str,
        update: dict[str, Any],
        logs: Sequence[LogEntry],
        *,
        ending: tuple[datetime, model.AttemptOutcome, str | None],
        on_duplicate: Callable[[ObjectId, ClaimInfo | None], JobResult] | None = None,
        timeout: float | None = None,
        unless_cancelled: bool = False,
    ) -> JobResult:
        """One fenced update (``unless_cancelled``: only while no cancellation is
        requested; a run whose cancellation was requested ends ``cancelled`` instead)."""
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        claim = self._claim_info(oid, token)
        if claim is not None:
            push_attempt(update, attempt_document(claim, *ending))
        self._push_logs(update, logs)
        self._receipt(update, token, op, result)
        fence: dict[str, Any] = {"_id": oid, "claim_token": token, "status": "active"}
        if unless_cancelled:
            fence.update(cancel.NOT_CANCELLED)

        def write() -> JobResult:
            try:
                res = self.store.col.update_one(fence, update)
            except DuplicateKeyError:
                if on_duplicate is None:
                    raise
                return on_duplicate(oid, claim)
            if res.matched_count == 1:
                return JobResult(result)  # type: ignore[arg-type]
            doc = self._miss_read(oid)
            reason = cancel.requested_in(doc, token) if unless_cancelled else None
            if reason is not None:
                return self._end_cancelled(oid, token, op, logs, reason, claim, ending[0])
            return self._resolution(doc, token, op)

        def guarded() -> JobResult:
            with self.store.guard(timeout):
                return write()

        if timeout is None:
            return call_with_retries(op, guarded)
        with self.store.bounded(timeout):
            return call_with_retries(op, guarded, max_seconds=timeout)

    def _end_cancelled(
        self,
        oid: ObjectId,
        token: str,
        op: str,
        logs: Sequence[LogEntry],
        reason: str | None,
        claim: ClaimInfo | None,
        now: datetime,
    ) -> JobResult:
        """End the claim ``token`` holds as ``cancelled`` (receipt under ``op``)."""
        update, _ = cancel.cancelled_update(now, reason, claim)
        self._push_logs(update, logs)
        self._receipt(update, token, op, "cancelled")
        fence = {"_id": oid, "claim_token": token, "status": "active"}
        if self.store.col.update_one(fence, update).matched_count == 1:
            return JobResult("cancelled")
        return self._resolve_miss(oid, token, op)

    def write_cancel(self, job_id: str, reason: str) -> model.CancelOutcome:
        oid = codec.parse_id(job_id)
        if oid is None:
            return "not-cancellable"
        now = self.now()
        return self.store.call("cancel", lambda: cancel.cancel(self.store, oid, reason, now))

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        now = self.now()

        def write() -> JobResult:
            reason = cancel.requested_in(self._miss_read(oid), token)
            claim = self._claim_info(oid, token)
            return self._end_cancelled(oid, token, "cancel", logs, reason, claim, now)

        return self.store.call("cancel", write)

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> model.HeartbeatResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return "lease-lost"
        update: dict[str, Any] = {"$set": {"heartbeat_at": self.now()}}
        self._push_logs(update, logs)

        def beat() -> model.HeartbeatResult:
            fence = {"_id": oid, "claim_token": token, "status": "active"}
            if self.store.col.update_one({**fence, **cancel.NOT_CANCELLED}, update).matched_count:
                return "applied"
            # Missed: the lease is gone, or a cancellation waits (renew, and report it).
            res = self.store.col.update_one(fence, update)
            return "cancel-requested" if res.matched_count == 1 else "lease-lost"

        return self.store.call("heartbeat", beat)

    def write_completions(self, op: str, completions: Sequence[base.Completion]) -> list[JobResult]:
        """``complete``: one fenced update. ``complete_many``: one unordered ``bulk_write`` with
        each one's fenced update and receipt. When every update matched, all are
        ``completed``; else each is resolved from its job's receipts, which also answers a
        repeat of a batch whose reply was lost. A write error on one update raises as a
        single completion would; a repeat answers the rest."""
        now = self.now()
        if op == "complete":  # one completion: one fenced update
            (one,) = completions
            kept = codec.result_fields(one.result)
            update_doc = codec.terminal_update("completed", now, **kept)
            ending: tuple[datetime, model.AttemptOutcome, str | None] = (now, "completed", None)
            return [
                self._fenced(
                    one.job_id,
                    one.token,
                    "complete",
                    "completed",
                    update_doc,
                    one.logs,
                    ending=ending,
                )
            ]
        claims = self._batch_claims(completions)

        def update(completion: base.Completion) -> dict[str, Any]:
            kept = codec.result_fields(completion.result)
            doc = codec.terminal_update("completed", now, **kept)
            claim = claims.get(completion.token)
            if claim is not None:
                push_attempt(doc, attempt_document(claim, now, "completed"))
            self._push_logs(doc, completion.logs)
            self._receipt(doc, completion.token, "complete", "completed")
            return doc

        batch = FencedBatch.of(completions, update, mongomock=self.store.mock)
        requests = batch.requests

        def write() -> list[JobResult]:
            if self.store.col.bulk_write(requests, ordered=False).matched_count == len(requests):
                return [JobResult("completed")] * len(requests)
            return [self._resolve_miss(oid, token, "complete") for oid, token in batch.fences]

        return batch.answers(self.store.call(op, write) if requests else [])

    def _batch_claims(self, completions: Sequence[base.Completion]) -> dict[str, ClaimInfo]:
        """The claim of each completion by token: remembered, or (claims another backend
        object made) read in one query."""
        claims: dict[str, ClaimInfo] = {}
        for c in completions:
            claim = self._claims.take(c.token)
            if claim is not None:
                claims[c.token] = claim
        missing = [
            c.token
            for c in completions
            if c.token not in claims and codec.parse_id(c.job_id) is not None
        ]
        if missing:
            docs = self.store.call(
                "claim-info",
                lambda: list(
                    self.store.col.find(
                        {"claim_token": {"$in": missing}, "status": "active"},
                        {**CLAIM_FIELDS, "claim_token": 1},
                    )
                ),
            )
            claims.update((d["claim_token"], claim_info(d)) for d in docs)
        return claims

    def write_failure(
        self, job_id: str, token: str, failure: base.Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        op, reason, kind = failure.op, failure.reason, failure.kind
        terminal = (failure.terminal_outcome, failure.error)
        if failure.retry_at is None:
            now = self.now()
            update = codec.terminal_update("failed", now, fail_reason=reason, failure_kind=kind)
            return self._fenced(
                job_id,
                token,
                op,
                "failed-terminal",
                update,
                logs,
                ending=(now, *terminal),
                unless_cancelled=True,
            )
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        now = self.now()
        doc = self.store.call(
            op,
            lambda: self.store.col.find_one(
                {"_id": oid, "claim_token": token, "status": "active"},
                {"attempts": 1, "max_attempts": 1, "cancel_requested": 1},
            ),
        )
        if doc is None:
            return self.store.call(op, lambda: self._resolve_miss(oid, token, op))
        if doc.get("cancel_requested") is not None:  # not back to pending: it was cancelled
            claim = self._claim_info(oid, token)
            requested = doc["cancel_requested"]
            return self.store.call(
                op, lambda: self._end_cancelled(oid, token, op, logs, requested, claim, now)
            )
        if doc["attempts"] >= doc["max_attempts"]:
            update = codec.terminal_update("failed", now, fail_reason=reason, failure_kind=kind)
            return self._fenced(
                job_id, token, op, "failed-terminal", update, logs, ending=(now, *terminal)
            )
        update = codec.back_to_pending(now, run_at=failure.retry_at, fail_reason=reason)
        return self._fenced(
            job_id,
            token,
            op,
            "retry-scheduled",
            update,
            logs,
            ending=(now, "retry-scheduled", failure.error),
            unless_cancelled=True,
            on_duplicate=lambda oid, claim: self._supersede(
                oid, token, op, now, logs, claim, fail_reason=reason
            ),
        )

    def _supersede(
        self,
        oid: ObjectId,
        token: str,
        op: str,
        now: datetime,
        logs: Sequence[LogEntry],
        claim: ClaimInfo | None,
        **fields: Any,
    ) -> JobResult:
        """A pending follower already holds the key: it covers this job's work."""
        update = codec.terminal_update("superseded", now, **fields)
        if claim is not None:
            push_attempt(update, attempt_document(claim, now, "superseded"))
        self._push_logs(update, logs)
        self._receipt(update, token, op, "superseded")
        res = self.store.col.update_one(
            {"_id": oid, "claim_token": token, "status": "active"}, update
        )
        if res.matched_count == 1:
            return JobResult("superseded")
        return self._resolve_miss(oid, token, op)

    def write_release(
        self, job_id: str, token: str, release: base.Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        now = self.now()
        update = (
            codec.back_to_pending(now)
            if release.run_at is None
            else codec.back_to_pending(now, run_at=release.run_at)
        )
        update["$inc"] = {"attempts": -1}
        return self._fenced(
            job_id,
            token,
            "release",
            "released",
            update,
            logs,
            ending=(now, "released", None),
            on_duplicate=lambda oid, claim: self._supersede(
                oid, token, "release", now, logs, claim
            ),
            timeout=release.timeout,
            unless_cancelled=True,
        )

    def append_journal(
        self, job_id: str, token: str, records: Sequence[model.JournalRecord], *, position: int
    ) -> model.JournalAppendResult:
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

        def write() -> model.JournalAppendResult:
            if self.store.col.update_one(query, update).matched_count == 1:
                return "applied"
            # Only the claim holder appends: entries past ``position`` are this append.
            repeat = {**fence, f"journal.{last}": {"$exists": True}}
            return "applied" if self.store.col.find_one(repeat, {"_id": 1}) else "lease-lost"

        return self.store.call("append_journal", write)

    # -- recovery and operations (the reaper and the queries) -----------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> model.ReapReport:
        report = self.reaper.reap(visibility_timeout, limit=limit)
        try:
            self.schedules.sweep_held()
        except DurablError as exc:  # the sweep's turn comes again; the report stands
            logger.warning("sweep of held schedule ticks failed: %s", exc)
        return report

    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        return self.queries.has_outstanding(type, dedupe_key)

    def get_job(self, job_id: str) -> Job[Any] | None:
        return self.queries.get_job(job_id)

    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        return self.queries.find_jobs(filters, page)

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        return self.queries.count_matching(filters, at_most=at_most, newest=newest)

    def retry(self, job_id: str) -> bool:
        return self.queries.retry(job_id)

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        return self.queries.delete_finished(older_than, statuses)

    def delete(self, job_id: str) -> bool:
        return self.queries.delete(job_id)

    def retry_selected(self, filters: JobFilter) -> int:
        return self.queries.retry_selected(filters)

    def delete_selected(self, filters: JobFilter) -> int:
        return self.queries.delete_selected(filters)

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        return self.queries.cancel_selected(filters, reason)

    def run_now(self, job_id: str) -> bool:
        return self.queries.run_now(job_id)

    def run_now_selected(self, filters: JobFilter) -> int:
        return self.queries.run_now_selected(filters)

    def get_stats(self, type: str | None = None) -> model.QueueStats:
        return self.queries.get_stats(type)

    def job_types(self) -> list[str]:
        return self.queries.job_types()

    def stats_by_type(self) -> dict[str, model.QueueStats]:
        return self.queries.stats_by_type()

    def find_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        return self.queries.read_activity(window, types)
