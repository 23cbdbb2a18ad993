"""MongoWrites: the writes fenced on a claim token (outcomes, heartbeats, cancellation,
the journal) of a :class:`~durabl.MongoJobQueue`.

Each is one update filtered on the claim (:func:`~durabl.stores.mongo.codec.fence`) that
also pushes the run's attempt entry, its logs and a receipt of the write. One that matches
nothing reads the job once to say why: its own earlier result (a repeat after a lost
reply finds its receipt), a terminal job, a lost lease, no job, or (for the writes that
would hand a run back) a cancellation requested meanwhile, which ends the run
``cancelled`` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from durabl.model import job as model
from durabl.model.attempts import AttemptOutcome
from durabl.model.job import JobResult, LogEntry
from durabl.model.rules import failure_end, heartbeat_answer, resolve_miss
from durabl.stores import base
from durabl.stores.mongo import cancel, codec
from durabl.stores.mongo.attempts import (
    CLAIM_FIELDS,
    ClaimInfo,
    ClaimMemo,
    claim_info,
    push_attempt,
)
from durabl.stores.mongo.bulk import FencedBatch
from durabl.stores.mongo.store import MongoStore

#: What the read after a fenced write that matched nothing needs (see ``_miss_read``).
MISS_FIELDS = {"status": 1, "receipts": 1, "claim_token": 1, "cancel_requested": 1}

#: When a run ends, how, and with what error: its attempt entry's last fields.
Ending = tuple[datetime, AttemptOutcome, str | None]
#: What a fenced write does instead when its update would take a dedupe slot a pending
#: follower holds: given the job and its claim, supersede the run.
OnDuplicate = Callable[[ObjectId, ClaimInfo | None], JobResult]


class MongoWrites:
    """The fenced writes on the collection of ``store``; ``memo`` holds the claims the
    queue made and has not recorded an outcome for (:class:`ClaimMemo`)."""

    def __init__(self, store: MongoStore, memo: ClaimMemo) -> None:
        self.store = store
        self.memo = memo

    # -- outcomes -------------------------------------------------------------------------
    def write_completions(self, op: str, completions: Sequence[base.Completion]) -> list[JobResult]:
        """``complete``: one fenced update. ``complete_many``: one unordered ``bulk_write``
        with each one's fenced update and receipt. When every update matched, all are
        ``completed``; else each is resolved from its job's receipts, which also answers a
        repeat of a batch whose reply was lost. A write error on one update raises as a
        single completion would; a repeat answers the rest."""
        now = self.store.now()
        ending: Ending = (now, "completed", None)
        if op == "complete":
            (one,) = completions
            done = codec.terminal_update("completed", now, **codec.result_fields(one.result))
            return [self._fenced(one.job_id, one.token, op, "completed", done, one.logs, ending)]
        claims = self._batch_claims(completions)

        def update(one: base.Completion) -> dict[str, Any]:
            done = codec.terminal_update("completed", now, **codec.result_fields(one.result))
            claim = claims.get(one.token)
            return _recorded(done, one.token, "complete", "completed", one.logs, claim, ending)

        batch = FencedBatch.of(completions, update, self.store.calls.update_request)
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
            claim = self.memo.take(c.token)
            if claim is not None:
                claims[c.token] = claim
        missing = [
            c.token
            for c in completions
            if c.token not in claims and codec.parse_id(c.job_id) is not None
        ]
        if missing:
            query = {"claim_token": {"$in": missing}, "status": "active"}
            fields = {**CLAIM_FIELDS, "claim_token": 1}
            docs = self.store.call("claim-info", lambda: list(self.store.col.find(query, fields)))
            claims.update((d["claim_token"], claim_info(d)) for d in docs)
        return claims

    def write_failure(
        self, job_id: str, token: str, failure: base.Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        op, reason, kind = failure.op, failure.reason, failure.kind
        now = self.store.now()
        terminal: Ending = (now, failure.terminal_outcome, failure.error)
        failed = codec.terminal_update("failed", now, fail_reason=reason, failure_kind=kind)
        if failure.retry_at is None:
            # failure_end without a retry, in the one write: "fail", or "cancel" when the
            # write misses on NOT_CANCELLED alone (then _write ends the run cancelled).
            return self._fenced(job_id, token, op, "failed-terminal", failed, logs, terminal, True)
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        fields = {"attempts": 1, "max_attempts": 1, "cancel_requested": 1}
        doc = self.store.call(op, lambda: self.store.col.find_one(codec.fence(oid, token), fields))
        if doc is None:
            return self.store.call(op, lambda: self._resolve_miss(oid, token, op))
        requested = doc.get("cancel_requested")
        end = failure_end(
            retrying=True,
            attempts=doc["attempts"],
            max_attempts=doc["max_attempts"],
            cancel_requested=requested is not None,
        )
        if end == "cancel":
            claim = self._claim_info(oid, token)
            return self.store.call(
                op, lambda: self._end_cancelled(oid, token, op, logs, requested, claim, now)
            )
        if end == "fail":
            return self._fenced(job_id, token, op, "failed-terminal", failed, logs, terminal)
        return self._fenced(
            job_id,
            token,
            op,
            "retry-scheduled",
            codec.back_to_pending(now, run_at=failure.retry_at, fail_reason=reason),
            logs,
            (now, "retry-scheduled", failure.error),
            unless_cancelled=True,
            on_duplicate=lambda oid, claim: self._supersede(
                oid, token, op, now, logs, claim, failure.error, fail_reason=reason
            ),
        )

    def write_release(
        self, job_id: str, token: str, release: base.Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        now = self.store.now()
        at = {} if release.run_at is None else {"run_at": release.run_at}
        update = codec.back_to_pending(now, **at)
        update["$inc"] = {"attempts": -1}
        return self._fenced(
            job_id,
            token,
            "release",
            "released",
            update,
            logs,
            (now, release.outcome, None),
            unless_cancelled=True,
            on_duplicate=lambda oid, claim: self._supersede(
                oid, token, "release", now, logs, claim
            ),
            timeout=release.timeout,
        )

    def _supersede(
        self,
        oid: ObjectId,
        token: str,
        op: str,
        now: datetime,
        logs: Sequence[LogEntry],
        claim: ClaimInfo | None,
        error: str | None = None,
        **fields: Any,
    ) -> JobResult:
        """A pending follower already holds the key: it covers this job's work (the
        attempt keeps ``error``, the failure that ended the run, if any)."""
        update = codec.terminal_update("superseded", now, **fields)
        return self._write(
            oid, token, op, "superseded", update, logs, claim, (now, "superseded", error)
        )

    # -- cancellation ---------------------------------------------------------------------
    def write_cancel(self, job_id: str, reason: str) -> model.CancelOutcome:
        oid = codec.parse_id(job_id)
        if oid is None:
            return "not-cancellable"
        now = self.store.now()
        return self.store.call("cancel", lambda: cancel.cancel(self.store, oid, reason, now))

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        now = self.store.now()

        def write() -> JobResult:
            reason = cancel.requested_in(self._miss_read(oid), token)
            claim = self._claim_info(oid, token)
            return self._end_cancelled(oid, token, "cancel", logs, reason, claim, now)

        return self.store.call("cancel", write)

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
        update, reason = cancel.cancelled_update(now, reason, None)
        return self._write(
            oid, token, op, "cancelled", update, logs, claim, (now, "cancelled", reason)
        )

    # -- the lease and the journal --------------------------------------------------------
    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> model.HeartbeatResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return "lease-lost"
        update: dict[str, Any] = {"$set": {"heartbeat_at": self.store.now()}}
        codec.push_logs(update, logs)

        def beat() -> model.HeartbeatResult:
            fence = codec.fence(oid, token)
            if self.store.col.update_one({**fence, **cancel.NOT_CANCELLED}, update).matched_count:
                return heartbeat_answer(held=True, cancel_requested=False)
            # Missed: the lease is gone, or a cancellation waits (renew, and report it).
            held = self.store.col.update_one(fence, update).matched_count == 1
            return heartbeat_answer(held, cancel_requested=True)

        return self.store.call("heartbeat", beat)

    def append_journal(
        self, job_id: str, token: str, records: Sequence[model.JournalRecord], *, position: int
    ) -> model.JournalAppendResult:
        oid = codec.parse_id(job_id)
        if oid is None:
            return "lease-lost"
        fence = codec.fence(oid, token)
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
            # rules.journal_holds_append, asked of the server: does the journal reach the
            # last entry of this append (length >= position + count)?
            repeat = {**fence, f"journal.{last}": {"$exists": True}}
            return "applied" if self.store.col.find_one(repeat, {"_id": 1}) else "lease-lost"

        return self.store.call("append_journal", write)

    # -- the fenced write and its miss ----------------------------------------------------
    def _fenced(
        self,
        job_id: str,
        token: str,
        op: str,
        result: model.ResultStatus,
        update: dict[str, Any],
        logs: Sequence[LogEntry],
        ending: Ending,
        unless_cancelled: bool = False,
        *,
        on_duplicate: OnDuplicate | None = None,
        timeout: float | None = None,
    ) -> JobResult:
        """:meth:`_write` as one store call (repeated on transient errors, all of it within
        ``timeout``), the claim's attempt entry read first if not remembered."""
        oid = codec.parse_id(job_id)
        if oid is None:
            return JobResult("not-found")
        claim = self._claim_info(oid, token)
        return self.store.call(
            op,
            lambda: self._write(
                oid, token, op, result, update, logs, claim, ending, unless_cancelled, on_duplicate
            ),
            timeout=timeout,
        )

    def _write(
        self,
        oid: ObjectId,
        token: str,
        op: str,
        result: model.ResultStatus,
        update: dict[str, Any],
        logs: Sequence[LogEntry],
        claim: ClaimInfo | None,
        ending: Ending,
        unless_cancelled: bool = False,
        on_duplicate: OnDuplicate | None = None,
    ) -> JobResult:
        """One fenced update that ends the run as ``result`` (``unless_cancelled``: only
        while no cancellation is requested; a run whose cancellation was requested ends
        ``cancelled`` instead)."""
        _recorded(update, token, op, result, logs, claim, ending)
        fence = codec.fence(oid, token)
        if unless_cancelled:
            fence.update(cancel.NOT_CANCELLED)
        try:
            if self.store.col.update_one(fence, update).matched_count == 1:
                return JobResult(result)
        except DuplicateKeyError:
            if on_duplicate is None:
                raise
            return on_duplicate(oid, claim)
        doc = self._miss_read(oid)
        reason = cancel.requested_in(doc, token) if unless_cancelled else None
        if reason is not None:
            return self._end_cancelled(oid, token, op, logs, reason, claim, ending[0])
        return _resolution(doc, token, op)

    def _resolve_miss(self, job_id: ObjectId, token: str, op: str) -> JobResult:
        return _resolution(self._miss_read(job_id), token, op)

    def _miss_read(self, job_id: ObjectId) -> dict[str, Any] | None:
        """The one read a fenced write that matched nothing makes: what decides the miss,
        and whether the claim it was fenced on has a cancellation requested."""
        return self.store.col.find_one({"_id": job_id}, MISS_FIELDS)

    def _claim_info(self, oid: ObjectId, token: str) -> ClaimInfo | None:
        """What the attempt entry of the claim ``token`` needs: remembered from the claim,
        else (a claim another backend object made) read; None when it is not held."""
        claim = self.memo.take(token)
        if claim is not None:
            return claim
        doc = self.store.call(
            "claim-info", lambda: self.store.col.find_one(codec.fence(oid, token), CLAIM_FIELDS)
        )
        return None if doc is None else claim_info(doc)


def _resolution(doc: dict[str, Any] | None, token: str, op: str) -> JobResult:
    """Why a fenced write matched nothing, from the job ``doc`` (``MISS_FIELDS``): its own
    earlier result, a terminal job, a lost lease, or no job at all."""
    return resolve_miss(None if doc is None else doc["status"], codec.receipt_of(doc, token, op))


def _recorded(
    update: dict[str, Any],
    token: str,
    op: str,
    result: model.ResultStatus,
    logs: Sequence[LogEntry],
    claim: ClaimInfo | None,
    ending: Ending,
) -> dict[str, Any]:
    """``update`` that also records the run it ends (or hands back) as ``result``: the
    attempt entry of its ``claim``, its ``logs``, and the receipt of the write ``op``."""
    push_attempt(update, claim, *ending)
    codec.push_logs(update, logs)
    codec.push_receipt(update, token, op, result)
    return update
