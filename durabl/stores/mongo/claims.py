"""MongoClaims: how a :class:`~durabl.MongoJobQueue` stores jobs and takes them: enqueue
(dedupe slots, coalescing and debounce, the cross-scope check), the atomic claim, and the
flow control around it (:mod:`durabl.stores.mongo.flow`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from durabl.model.exceptions import BackendUnavailableError, DedupeScopeConflictError, DurablError
from durabl.model.flow import LimitedTypes, RateLimit
from durabl.model.job import FencedWrites, JobHandle, handle_for
from durabl.model.options import NewJob
from durabl.model.rules import created_claimed, enqueues_before_inline_run, holder_update
from durabl.stores.base import EnqueueResult, InlineClaimResult
from durabl.stores.mongo import codec, flow
from durabl.stores.mongo.attempts import ClaimMemo
from durabl.stores.mongo.codec import ACTIVE_SLOT, LIVE_SLOT, PENDING_SLOT
from durabl.stores.mongo.pauses import MongoPauses
from durabl.stores.mongo.store import NO_RECEIPTS, MongoStore

# The name MongoJobQueue has always logged under.
logger = logging.getLogger("durabl.stores.mongo.backend")

#: The claim order: lowest priority first, then oldest ``run_at`` (the claim index's).
CLAIM_ORDER = [("priority", 1), ("run_at", 1), ("_id", 1)]


class MongoClaims:
    """Enqueue and claim on the collection of ``store``. Every claim is remembered in
    ``memo`` (for the outcome's attempt entry) and its handle writes through
    ``writer`` (the queue); no claim takes a job of a type ``pauses`` says is paused."""

    def __init__(
        self, store: MongoStore, memo: ClaimMemo, writer: FencedWrites, pauses: MongoPauses
    ) -> None:
        self.store = store
        self.pauses = pauses
        self.memo = memo
        self.writer = writer
        self.rates = store.side_collection("rate_limits")
        #: The types with a rate limit: a claim of another type reads no window.
        self.limited = LimitedTypes(store.clock.monotonic)
        #: Whether this store object has met a job with a concurrency key: until then a
        #: claim skips the per-key count (see :meth:`_key_usage`).
        self.keys_seen = False

    # -- enqueue --------------------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        now = self.store.now()
        doc = codec.new_document(job, now)
        codec.check_document_size(job.type, doc)
        return self._add(job, doc, now, {"status": "pending"})

    def _add(
        self, job: NewJob, doc: dict[str, Any], now: datetime, own: Mapping[str, Any]
    ) -> EnqueueResult:
        """Store ``job`` as ``doc``: its id; when its dedupe slot is taken, no id (and the
        payload coalesced, as asked); a conflict of scopes backs it out (``own``: the
        filter it is deleted by, if it is still as inserted)."""
        if not self._insert(doc):
            return self._slot_taken(job, now)
        if job.dedupe_key is not None:
            self._check_scope_conflict(job, doc["_id"], own)
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
        """The pending slot is held: update the pending holder of the same type as
        ``rules.holder_update`` says (coalesce, debounce), in one update; never an active
        job."""
        update = holder_update(job)
        if update is None:
            return EnqueueResult(None)
        holder = {
            codec.pending_slot(job.dedupe_scope): job.dedupe_key,
            "status": "pending",
            "type": job.type,
        }
        changes: dict[str, Any] = {"updated_at": now}
        if update.replace_data:
            changes["data"] = job.data
        col, calls = self.store.col, self.store.calls
        if update.push_to is not None and update.within_ms is not None:
            # The bound is the holder's created_at + within: computed in the update.
            held = self.store.call(
                "debounce", lambda: calls.push_bounded(col, holder, changes, update)
            )
        else:
            operators: dict[str, Any] = {"$set": changes}
            if update.push_to is not None:  # a push only delays (rules.debounced_run_at)
                operators["$max"] = {"run_at": update.push_to}
            res = self.store.call("coalesce", lambda: col.update_one(holder, operators))
            held = res.matched_count == 1
        pushed = update.push_to is not None
        return EnqueueResult(
            None, coalesced=held and update.replace_data, debounced=held and pushed
        )

    def _check_scope_conflict(
        self, job: NewJob, own_id: ObjectId, own_filter: Mapping[str, Any]
    ) -> None:
        """Both racers of a cross-scope pair see each other after inserting and back out."""
        assert job.dedupe_key is not None
        others = [{slot: job.dedupe_key} for slot in codec.other_scope_slots(job.dedupe_scope)]
        query = {"$or": others, "_id": {"$ne": own_id}}
        other = self.store.call(
            "dedupe scope check", lambda: self.store.col.find_one(query, {"dedupe_scope": 1})
        )
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
        if self.pauses.is_paused(job.type):
            # No inline run of a paused type: the job waits, pending, for the resume.
            enq = self.enqueue(job)
            return InlineClaimResult(None, enq.job_id, enq.coalesced)
        now = self.store.now()
        if enqueues_before_inline_run(job):
            # The pending slot decides: a pending follower already covers the work. A job
            # with a concurrency key is claimed only while its key has room.
            enq = self.enqueue(job)
            if enq.job_id is None:
                return InlineClaimResult(None, None, enq.coalesced)
            usage = self._key_usage()
            query = flow.with_room({"_id": ObjectId(enq.job_id), "status": "pending"}, usage)
            handle, blocked = self._claim_one(query, now, lease_owner, usage=usage)
            blocked = blocked or (handle is None and job.concurrency_key is not None)
            if handle is None:
                return InlineClaimResult(None, enq.job_id if blocked else None)
            return InlineClaimResult(handle)
        doc = codec.new_document(job, now)
        codec.check_document_size(job.type, doc)
        token = uuid.uuid4().hex
        doc.update(created_claimed(token, now, lease_owner))
        added = self._add(job, doc, now, {"claim_token": token})
        if added.job_id is None:
            return InlineClaimResult(None, None, added.coalesced)
        self.memo.remember(token, doc)
        # Build the handle from what the store holds (lists for tuples, milliseconds), not
        # from the caller's objects.
        job_doc = codec.to_job(codec.round_trip(doc))
        return InlineClaimResult(handle_for(job_doc, token, self.writer))

    # -- claiming -------------------------------------------------------------------------
    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        if self.pauses.is_paused(type):
            return []
        now = self.store.now()
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

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        if self.pauses.is_paused(type):
            return None
        now = self.store.now()
        query = {
            "$or": [{PENDING_SLOT: dedupe_key}, {LIVE_SLOT: dedupe_key}],
            "status": "pending",
            "type": type,
            "run_at": {"$lte": now},
        }
        usage = self._key_usage()
        handle, _ = self._claim_one(flow.with_room(query, usage), now, lease_owner, usage=usage)
        return handle

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
        token = uuid.uuid4().hex
        col = self.store.col
        taken: dict[str, Any] = {
            "status": "active",
            "claim_token": token,
            "claimed_at": now,
            "heartbeat_at": now,
            "updated_at": now,
            "lease_owner": owner,
        }
        if reserve:
            taken["reserved"] = True
        update = {
            "$set": taken,
            "$inc": {"attempts": 1},
            "$rename": {PENDING_SLOT: ACTIVE_SLOT},
            # A key's slot is taken afresh (durabl.stores.mongo.flow): the one a job held in
            # an earlier run may be another's now.
            "$unset": {flow.SLOT: ""},
        }

        def claim() -> tuple[JobHandle[Any] | None, bool]:
            try:
                doc = self.store.col.find_one_and_update(
                    query,
                    update,
                    sort=CLAIM_ORDER,
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
            self.keys_seen = self.keys_seen or keyed
            needs_slot = keyed and doc.get(flow.SLOT) is None
            if needs_slot and not flow.take_slot(col, doc, token, usage or flow.KeyUsage()):
                flow.unclaim(col, doc["_id"], token, now)  # the key had no room
                return None, True
            self.memo.remember(token, doc)
            return handle_for(codec.to_job(doc), token, self.writer), False

        # Not repeated on transient errors: a claim that applied but whose reply was lost
        # would claim a second job (the driver's own retry repeats the same write, which the
        # server answers from its record).
        try:
            return self.store.call("claim", claim, retry=False)
        except BackendUnavailableError:
            # The token is this claim's alone: one read (on the lease index) finds the job
            # it took if it applied, which would otherwise wait a whole lease for the reaper.
            fence = {"status": "active", "heartbeat_at": now, "claim_token": token}
            doc = self.store.call("claim", lambda: self.store.col.find_one(fence, NO_RECEIPTS))
            if doc is None:
                raise
            # The lost reply may have come from the slot's write: a keyed job found without
            # its slot takes one now (or goes back), like a claim that met no fault.
            return self.store.call("claim", lambda: settle(doc))

    def _blocked_candidate(self, query: Mapping[str, Any]) -> ObjectId:
        """The job a claim just failed on (the first candidate in claim order)."""

        def find() -> ObjectId:
            doc = self.store.col.find_one(query, {"_id": 1}, sort=CLAIM_ORDER)
            return doc["_id"] if doc else ObjectId()

        return self.store.call("claim", find)

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

    # -- flow control (durabl.stores.mongo.flow) ------------------------------------------
    def _key_usage(self) -> flow.KeyUsage:
        """The active jobs of each key, read once per claim, but only once this store object
        has claimed a job with a key: before that, no job is left out of the query, and the
        slot index alone keeps a key to its limit (a job of a full key claimed then is
        handed back at once, inside the claim, which also turns the count on). So stores
        whose jobs use no keys pay nothing per claim."""
        if not self.keys_seen:
            return flow.KeyUsage()
        return self.store.call("claim", lambda: flow.KeyUsage.read(self.store.col))

    def _allowance(self, type: str, now: datetime) -> tuple[RateLimit, int] | None:
        """The rate limit of ``type`` and what is left of its window; no read at all for a
        type this store object knows has no limit (see :class:`LimitedTypes`)."""
        rates = self.rates
        if not self.limited.has_limit(type, self.limited_types):
            return None
        left = self.store.call("claim", lambda: flow.allowance(rates, type, now))
        if left is None:
            self.limited.note(type, False)  # removed by another process
        return left

    def _count_starts(
        self, type: str, now: datetime, claimed: list[JobHandle[Any]]
    ) -> list[JobHandle[Any]]:
        """Count the claims in the type's window; hand back any that a racing claimer
        left no room for (their handlers never start)."""
        rates, col = self.rates, self.store.col
        fits = self.store.call("claim", lambda: flow.count_starts(rates, type, now, len(claimed)))
        over = [(ObjectId(h.id), h.claim_token) for h in claimed[fits:]]

        def hand_back() -> None:
            for job_id, token in over:
                flow.unclaim(col, job_id, token, now)

        if over:
            self.store.call("claim", hand_back)
        return claimed[:fits]

    def limited_types(self) -> list[str]:
        return self.store.call("claim", lambda: flow.limited_types(self.rates))

    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        self.store.call("set_rate_limit", lambda: flow.write_rate(self.rates, type, rate))
        self.limited.note(type, rate is not None)

    def read_rate_limit(self, type: str) -> RateLimit | None:
        return self.store.call("get_rate_limit", lambda: flow.read_rate(self.rates, type))
