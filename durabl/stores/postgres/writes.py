"""The writes of the PostgreSQL store that take more than one statement, each run inside
the transaction the caller opened (see :class:`~durabl.stores.postgres.connection.Database`).

Dedupe rests on the unique partial indexes over the three slot columns. A unique violation
aborts a PostgreSQL transaction, so no write here provokes one on purpose: inserts say
``ON CONFLICT DO NOTHING``, and a move back to the pending slot first checks, under the
job's row lock, that no follower holds it (a racing enqueue that slips in between makes the
update fail, the whole transaction rolls back and runs again, and then sees the follower).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model import rules
from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.job import (
    ATTEMPTS_KEPT,
    AttemptOutcome,
    CancelOutcome,
    JobResult,
    LogEntry,
    ReapReport,
    ResultStatus,
)
from durabl.model.options import MAX_LOG_ENTRIES, RECEIPTS_KEPT, NewJob
from durabl.model.rows import encode_journal, encode_trace_context
from durabl.model.tagged_json import encode_payload
from durabl.stores.base import Completion, EnqueueResult
from durabl.stores.postgres import codec
from durabl.stores.postgres.sql import Queries


def fence(job_id: str, token: str) -> dict[str, Any]:
    """The parameters of the claim fence for one claim."""
    return {"ids": [job_id], "tokens": [token]}


# -- enqueue ----------------------------------------------------------------------------------
def new_row(job: NewJob, channel: str, now: datetime | None) -> dict[str, Any]:
    """The parameters of a new job's insert; its payload encoded here, outside any
    transaction."""
    key, scope = job.dedupe_key, job.scope_for_store
    return {
        "id": uuid.uuid4().hex,
        "type": job.type,
        "data": codec.encode_payload(job.data),
        "priority": job.priority,
        "run_at": codec.instant(job.run_at),
        "max_attempts": job.max_attempts,
        "dedupe_key": key,
        "dedupe_scope": scope,
        "live_slot": key if scope == "pending+active" else None,
        "pending_slot": key if scope == "pending" else None,
        "backoff": job.backoff.kind,
        "backoff_delay": float(job.backoff.delay),
        "backoff_max_delay": float(job.backoff.max_delay),
        "concurrency_key": job.concurrency_key,
        "concurrency_limit": job.concurrency_limit,
        "trace_context": encode_trace_context(job.trace_context),
        "channel": channel,
        "now": now,
    }


def lock_key(cur: Cursor[DictRow], q: Queries, lock_class: int, key: str) -> None:
    """Serialise, until the transaction ends, with every other write taking ``key``."""
    cur.execute(q.lock_key, {"lock_class": lock_class, "key": key})


def check_scope(cur: Cursor[DictRow], q: Queries, job: NewJob) -> None:
    """Raise (the transaction then stores nothing) when the key is live under the other
    scope. The caller holds the key's lock, so no racer can slip in between."""
    assert job.dedupe_key is not None
    pending_active = job.dedupe_scope == "pending+active"
    statement = q.scope_of_pending_or_active if pending_active else q.scope_of_live
    cur.execute(statement, {"key": job.dedupe_key})
    row = cur.fetchone()
    if row is not None:
        raise DedupeScopeConflictError(
            job.dedupe_key, job.dedupe_scope, row["dedupe_scope"] or "unknown"
        )


def slot_taken(cur: Cursor[DictRow], q: Queries, job: NewJob, row: dict[str, Any]) -> EnqueueResult:
    """The pending slot is held: with coalesce="latest", replace the payload of the pending
    holder of the same type (never an active job's)."""
    if job.coalesce != "latest" or job.dedupe_key is None:
        return EnqueueResult(None)
    statement = q.coalesce_live if job.dedupe_scope == "pending+active" else q.coalesce_pending
    values = {"data": row["data"], "now": row["now"], "key": job.dedupe_key, "type": job.type}
    cur.execute(statement, values)
    return EnqueueResult(None, coalesced=cur.fetchone() is not None)


def enqueue(
    cur: Cursor[DictRow], q: Queries, job: NewJob, row: dict[str, Any], lock_class: int
) -> EnqueueResult:
    """Insert (and NOTIFY); on a taken slot, coalesce. Repeatable: an insert that already
    committed before a lost connection is found again by its id."""
    if job.dedupe_key is not None:
        lock_key(cur, q, lock_class, job.dedupe_key)
        check_scope(cur, q, job)
    cur.execute(q.insert_pending, row)
    if cur.fetchone() is not None:
        return EnqueueResult(row["id"])
    cur.execute(q.job_exists, row)
    if cur.fetchone() is not None:  # this very insert, committed by an earlier attempt
        return EnqueueResult(row["id"])
    return slot_taken(cur, q, job, row)


# -- logs and receipts ------------------------------------------------------------------------
def add_logs(cur: Cursor[DictRow], q: Queries, pairs: Sequence[tuple[str, LogEntry]]) -> None:
    """Append each (job id, entry), dropping each job's oldest past MAX_LOG_ENTRIES."""
    if not pairs:
        return
    params = codec.log_params(pairs)
    cur.execute(q.add_logs, params)
    cur.execute(q.trim_logs, {"job_ids": sorted(set(params["job_ids"])), "keep": MAX_LOG_ENTRIES})


def add_receipt(
    cur: Cursor[DictRow], q: Queries, job_id: str, token: str, op: str, result: str
) -> None:
    """Remember what (token, op) did, keeping the newest RECEIPTS_KEPT per job (the job's
    row lock, taken by the fenced write, orders the receipts of one job)."""
    cur.execute(q.add_receipt, {"id": job_id, "token": token, "op": op, "result": result})
    n = int(cur.fetchone()["n"])  # type: ignore[index]
    if n > RECEIPTS_KEPT:
        cur.execute(q.trim_receipts, {"id": job_id, "n": n - RECEIPTS_KEPT})


def resolve_miss(cur: Cursor[DictRow], q: Queries, job_id: str, token: str, op: str) -> JobResult:
    """Why a fenced write matched nothing: its own earlier result, a terminal job, a lost
    lease, or no job at all."""
    cur.execute(q.resolve_miss, {"id": job_id, "token": token, "op": op})
    row = cur.fetchone()
    if row is None:
        return rules.resolve_miss(None, None)
    if op == "complete" and row["status"] == "completed" and row["done_token"] == token:
        return rules.resolve_miss("completed", "completed")  # this completion, repeated
    return rules.resolve_miss(row["status"], row["receipt"])


# -- fenced writes ----------------------------------------------------------------------------
def complete_many(
    cur: Cursor[DictRow], q: Queries, completions: Sequence[Completion], now: datetime | None
) -> list[JobResult]:
    """One statement completes every job whose fence holds (each on its own token); logs
    go in with them; for the others, why not. No receipt row: the row keeps the claim
    token (``done_token``), which answers a repeat of a completion."""
    params = {
        "ids": [c.job_id for c in completions],
        "tokens": [c.token for c in completions],
        "results": [None if c.result is None else encode_payload(c.result) for c in completions],
        "now": now,
        "status": "completed",
        **ending("completed"),
    }
    cur.execute(q.complete, params)
    done = {(r["id"], r["done_token"]) for r in cur.fetchall()}
    add_logs(
        cur, q, [(c.job_id, e) for c in completions if (c.job_id, c.token) in done for e in c.logs]
    )
    return [
        JobResult("completed")
        if (c.job_id, c.token) in done
        else resolve_miss(cur, q, c.job_id, c.token, "complete")
        for c in completions
    ]


def ending(outcome: AttemptOutcome, error: str | None = None) -> dict[str, Any]:
    """The parameters of the history entry a terminal or back-to-pending write adds."""
    return {"outcome": outcome, "error": error, "kept": ATTEMPTS_KEPT}


def terminal(
    cur: Cursor[DictRow],
    q: Queries,
    params: dict[str, Any],
    status: str,
    *,
    outcome: AttemptOutcome,
    error: str | None = None,
    reason: str | None = None,
    kind: str | None = None,
) -> bool:
    """End the fenced claims in ``status`` (freeing every slot and the lease), the
    attempt ending as ``outcome``."""
    values = {**params, "status": status, "reason": reason, "kind": kind}
    cur.execute(q.terminal, {**values, **ending(outcome, error)})
    return bool(cur.fetchall())


def to_pending_or_supersede(
    cur: Cursor[DictRow],
    q: Queries,
    params: dict[str, Any],
    followed: bool,
    result: ResultStatus,
    *,
    refund: bool = False,
    unstarted: bool = False,
    due_now: bool = False,
    run_at: datetime | None = None,
    reason: str | None = None,
    outcome: AttemptOutcome,
    error: str | None = None,
) -> ResultStatus | None:
    """Back to pending (``result``, the attempt ending as ``outcome``); ``superseded`` when
    a follower holds the pending slot (``followed``, read under the row lock); None when
    the fence does not hold."""
    if followed:
        done = terminal(cur, q, params, "superseded", outcome="superseded", error=error)
        return "superseded" if done else None
    values = {
        **ending(outcome, error),
        **params,
        "refund": int(refund),
        "unstarted": int(unstarted),
        "due_now": due_now,
        "run_at": codec.instant(run_at),
        "reason": reason,
    }
    cur.execute(q.to_pending, values)
    return result if cur.fetchall() else None


def locked_claim(cur: Cursor[DictRow], q: Queries, params: dict[str, Any]) -> DictRow | None:
    """The fenced claim's row, locked until the transaction ends (None: not held)."""
    cur.execute(q.lock_claim, params)
    return cur.fetchone()


def fail(
    cur: Cursor[DictRow],
    q: Queries,
    params: dict[str, Any],
    reason: str,
    retry_at: datetime,
    exhausted: str,
    *,
    error: str | None = None,
    terminal_outcome: AttemptOutcome = "failed",
) -> ResultStatus | None:
    """Retry at ``retry_at`` while attempts remain, else fail with failure kind
    ``exhausted``; the attempt count is read under the row lock."""
    row = locked_claim(cur, q, params)
    if row is None:
        return None
    if row["cancel_requested"] is not None:  # not back to pending: it was cancelled
        return end_cancelled(cur, q, params, row["cancel_requested"])
    if row["attempts"] >= row["max_attempts"]:
        done = terminal(
            cur,
            q,
            params,
            "failed",
            outcome=terminal_outcome,
            error=error,
            reason=reason,
            kind=exhausted,
        )
        return "failed-terminal" if done else None
    return to_pending_or_supersede(
        cur,
        q,
        params,
        row["followed"],
        "retry-scheduled",
        run_at=retry_at,
        reason=reason,
        outcome="retry-scheduled",
        error=error,
    )


# -- cancelling -------------------------------------------------------------------------------
def cancel(cur: Cursor[DictRow], q: Queries, params: dict[str, Any]) -> CancelOutcome:
    """Cancel a pending job, or request it of an active one (``params``: id, reason, now)."""
    cur.execute(q.cancel_pending, params)
    if cur.fetchone() is not None:
        return "cancelled"
    cur.execute(q.request_cancel, params)
    return "requested" if cur.fetchone() is not None else "not-cancellable"


def cancel_matching(cur: Cursor[DictRow], q: Queries, where: str, params: dict[str, Any]) -> int:
    """:func:`cancel` every job ``where`` selects (``params``: its values, reason, now): one
    statement for the pending ones, one for the active ones; how many of both."""
    cur.execute(q.listing(q.cancel_pending_matching, where), params)
    cancelled = cur.rowcount
    cur.execute(q.listing(q.request_cancel_matching, where), params)
    return cancelled + cur.rowcount


def run_now(cur: Cursor[DictRow], q: Queries, where: str, params: dict[str, Any]) -> int:
    """Make every delayed pending job ``where`` selects due now (a NOTIFY each); how many."""
    cur.execute(q.listing(q.run_now_matching, where), params)
    return len(cur.fetchall())


def end_cancelled(
    cur: Cursor[DictRow], q: Queries, params: dict[str, Any], reason: str | None
) -> ResultStatus | None:
    """End the fenced claim as ``cancelled`` (``reason`` its fail reason and the attempt's
    error)."""
    reason = rules.cancelled_reason(reason)
    done = terminal(cur, q, params, "cancelled", outcome="cancelled", error=reason, reason=reason)
    return "cancelled" if done else None


def append_journal(
    cur: Cursor[DictRow],
    q: Queries,
    params: dict[str, Any],
    records: Sequence[Any],
    position: int,
) -> bool:
    """Append ``records`` when the journal holds exactly ``position`` entries, in one
    statement. True when the journal then holds them (a repeat of an append that already
    applied counts); False when the fence does not hold."""
    if records:
        values = {**params, "journal": encode_journal(records), "count": len(records)}
        cur.execute(q.append_journal, {**values, "position": position})
        if cur.fetchone() is not None:
            return True
    cur.execute(q.journal_len, params)
    row = cur.fetchone()
    # Only the claim holder appends: entries past ``position`` are this append.
    return row is not None and row["journal_len"] >= position + len(records)


# -- recovery and operations ------------------------------------------------------------------
def reap_one(cur: Cursor[DictRow], q: Queries, row: DictRow, now: datetime | None) -> str | None:
    """Recover one expired lease (locked by the caller's select) as
    :func:`rules.reap_decision` says: ``stalled``, ``recovered`` (pending again, or
    cancelled as requested), ``superseded`` or None."""
    params = {**fence(row["id"], row["claim_token"]), "now": now}
    decision = rules.reap_decision(
        row["attempts"],
        row["max_attempts"],
        reserved=bool(row["reserved"]),
        unstarted_reaps=row["unstarted_reaps"],
        cancel_requested=row["cancel_requested"] is not None,
    )
    if decision == "cancel":  # its worker is gone: cancelled now
        ended = end_cancelled(cur, q, params, row["cancel_requested"])
        return None if ended is None else "recovered"
    if decision == "stall":
        done = terminal(
            cur,
            q,
            params,
            "failed",
            outcome="stalled",
            error=rules.STALLED_REASON,
            reason=rules.STALLED_REASON,
            kind="stalled",
        )
        return "stalled" if done else None
    refund = decision == "refund"
    moved = to_pending_or_supersede(
        cur,
        q,
        params,
        row["followed"],
        "released",
        refund=refund,
        unstarted=refund,
        due_now=True,
        outcome="lease-lost",
        error=rules.STALLED_REASON,
    )
    if moved is None:
        return None
    return "superseded" if moved == "superseded" else "recovered"


def reap(cur: Cursor[DictRow], q: Queries, params: dict[str, Any], limit: int) -> ReapReport:
    """Recover up to ``limit`` expired leases (``params``: ``now``, ``timeout``, ``limit``),
    oldest first, skipping those another reaper holds (SKIP LOCKED)."""
    cur.execute(q.expired, params)
    stuck = cur.fetchall()
    counts = {"recovered": 0, "stalled": 0, "superseded": 0}
    ids: list[str] = []
    for row in stuck:
        outcome = reap_one(cur, q, row, params["now"])
        if outcome is not None:
            counts[outcome] += 1
            ids.append(row["id"])
    saturated = len(stuck) >= limit
    return ReapReport(
        counts["recovered"], counts["stalled"], counts["superseded"], saturated, tuple(ids)
    )


def retry(
    cur: Cursor[DictRow], q: Queries, job_id: str, now: datetime | None, lock_class: int
) -> bool:
    """failed -> pending with attempts 0, due now, taking its key back; False when the job
    is not failed or its key is live (under either scope)."""
    cur.execute(q.failed_for_retry, {"id": job_id})
    row = cur.fetchone()
    if row is None:
        return False
    key, slot = row["dedupe_key"], None
    if key is not None:
        lock_key(cur, q, lock_class, key)
        scope = row["dedupe_scope"] or "pending+active"
        other = q.scope_of_live if scope == "pending" else q.scope_of_pending_or_active
        cur.execute(other, {"key": key})
        if cur.fetchone() is not None:
            return False
        slot = "live" if scope == "pending+active" else "pending"
        cur.execute(q.slot_held, {"slot": slot, "key": key})
        if cur.fetchone() is not None:
            return False
    cur.execute(q.retry, {"id": job_id, "now": now, "key": key, "slot": slot})
    return cur.fetchone() is not None
