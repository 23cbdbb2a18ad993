"""The writes of the SQLite store, each run inside a write transaction the caller opened.

Dedupe rests on the unique partial indexes over the three slot columns: an insert that
would take a held slot does nothing, and a move of a slot back to ``pending_slot`` that a
follower already holds fails on the index (SQLite then undoes just that statement, the
transaction carries on) and the run is superseded instead.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from durabl.model import rules
from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.job import (
    ATTEMPTS_KEPT,
    AttemptOutcome,
    CancelOutcome,
    JobResult,
    LogEntry,
    ResultStatus,
)
from durabl.model.options import MAX_LOG_ENTRIES, RECEIPTS_KEPT, NewJob
from durabl.model.rows import decode_journal, encode_trace_context
from durabl.stores.base import Completion, EnqueueResult
from durabl.stores.sqlite import codec
from durabl.stores.sqlite.queries import JOB_COLUMNS, JOBS, LOGS, RECEIPTS

FENCE = "id = :id AND claim_token = :token AND status = 'active'"
"""The claim fence every write after a claim carries."""
_CLEAR_LEASE = (
    "claim_token = NULL, heartbeat_at = NULL, claimed_at = NULL, lease_owner = NULL, reserved = 0"
)
# The claim that ends adds its entry to the history (the newest ATTEMPTS_KEPT kept) in the
# statement that records its outcome: SET reads the row as it was, lease fields included.
_ADD_ATTEMPT = (
    "attempt_history = json_insert(CASE WHEN json_array_length(coalesce(attempt_history, "
    "'[]')) >= :kept THEN json_remove(attempt_history, '$[0]') ELSE coalesce(attempt_history, "
    "'[]') END, '$[#]', json_object('n', attempts, 'w', lease_owner, 's', claimed_at, "
    "'e', :now, 'o', :outcome, 'x', :error))"
)
TERMINAL = (
    "status = :status, updated_at = :now, finished_at = :now, cancel_requested = NULL, "
    f"live_slot = NULL, pending_slot = NULL, active_slot = NULL, {_ADD_ATTEMPT}, {_CLEAR_LEASE}"
)
# Back to pending: a pending-scope job moves its active slot back to the pending slot (a
# follower holding that slot makes this fail on the unique index); the live slot stays.
BACK_TO_PENDING = (
    "status = 'pending', updated_at = :now, pending_slot = active_slot, active_slot = NULL, "
    f"{_ADD_ATTEMPT}, {_CLEAR_LEASE}"
)


def ending(outcome: AttemptOutcome, error: str | None = None) -> dict[str, Any]:
    """The parameters of the history entry a terminal or back-to-pending write adds."""
    return {"outcome": outcome, "error": error, "kept": ATTEMPTS_KEPT}


# One statement claims the whole batch. Candidates are due pending jobs in claim order,
# skipping a pending-scope follower whose key already has an active run, so the unique
# index on active_slot never fires here. Each row gets its own random token.
_CLAIM = f"""
UPDATE {JOBS}
SET status = 'active', claim_token = lower(hex(randomblob(16))), attempts = attempts + 1,
    active_slot = pending_slot, pending_slot = NULL,
    claimed_at = :now, heartbeat_at = :now, updated_at = :now, lease_owner = :owner{{reserve}}
WHERE seq IN (
    SELECT c.seq FROM {JOBS} AS c {{index}}
    WHERE c.status = 'pending' AND {{candidates}}
      AND (c.pending_slot IS NULL OR NOT EXISTS (
          SELECT 1 FROM {JOBS} AS a WHERE a.active_slot = c.pending_slot))
    ORDER BY c.priority, c.run_at, c.seq
    LIMIT :limit)
RETURNING {JOB_COLUMNS}, claim_token
"""
_INSERT_COLUMNS = (
    "id", "type", "data", "status", "priority", "run_at", "attempts", "max_attempts",
    "dedupe_key", "dedupe_scope", "live_slot", "pending_slot", "created_at", "updated_at",
    "backoff", "backoff_delay", "backoff_max_delay", "claim_token", "heartbeat_at",
    "claimed_at", "lease_owner", "concurrency_key", "concurrency_limit", "trace_context",
)  # fmt: skip
# Any conflict is a dedupe slot (ids are random): the insert then simply does nothing.
_INSERT = (
    f"INSERT INTO {JOBS} ({', '.join(_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in _INSERT_COLUMNS)}) ON CONFLICT DO NOTHING"
)


def pending_slot(scope: str) -> str:
    """The column a pending job of ``scope`` holds its key in."""
    return "live_slot" if scope == "pending+active" else "pending_slot"


def other_scope_filter(scope: str) -> str:
    """Where a key in use under the *other* scope shows (parameter ``:key``)."""
    if scope == "pending+active":
        return "(pending_slot = :key OR active_slot = :key)"
    return "live_slot = :key"


# -- enqueue ----------------------------------------------------------------------------------
def new_row(job: NewJob, now: int) -> dict[str, Any]:
    """The columns of a new pending job; its payload encoded here, outside any transaction."""
    key, scope = job.dedupe_key, job.scope_for_store
    return {
        "id": uuid.uuid4().hex,
        "type": job.type,
        "data": codec.encode_payload(job.data),
        "status": "pending",
        "priority": job.priority,
        "run_at": codec.to_ms(job.run_at) if job.run_at is not None else now,
        "attempts": 0,
        "max_attempts": job.max_attempts,
        "dedupe_key": key,
        "dedupe_scope": scope,
        "live_slot": key if scope == "pending+active" else None,
        "pending_slot": key if scope == "pending" else None,
        "created_at": now,
        "updated_at": now,
        "backoff": job.backoff.kind,
        "backoff_delay": float(job.backoff.delay),
        "backoff_max_delay": float(job.backoff.max_delay),
        "claim_token": None,
        "heartbeat_at": None,
        "claimed_at": None,
        "lease_owner": None,
        "concurrency_key": job.concurrency_key,
        "concurrency_limit": job.concurrency_limit,
        "trace_context": encode_trace_context(job.trace_context),
    }


def check_scope(conn: sqlite3.Connection, job: NewJob) -> None:
    """Raise (the transaction then stores nothing) when the key is live under the other
    scope. Inside the write transaction, so no racer can slip in between."""
    assert job.dedupe_key is not None
    other = conn.execute(
        f"SELECT dedupe_scope FROM {JOBS} WHERE {other_scope_filter(job.dedupe_scope)} LIMIT 1",
        {"key": job.dedupe_key},
    ).fetchone()
    if other is not None:
        raise DedupeScopeConflictError(
            job.dedupe_key, job.dedupe_scope, other["dedupe_scope"] or "unknown"
        )


def insert(conn: sqlite3.Connection, row: dict[str, Any]) -> bool:
    """Insert; False when a dedupe slot is taken."""
    return conn.execute(_INSERT, row).rowcount == 1


def slot_taken(conn: sqlite3.Connection, job: NewJob, row: dict[str, Any]) -> EnqueueResult:
    """The pending slot is held: with coalesce="latest", replace the payload of the pending
    holder of the same type (never an active job's)."""
    if job.coalesce != "latest" or job.dedupe_key is None:
        return EnqueueResult(None)
    cur = conn.execute(
        f"UPDATE {JOBS} SET data = :data, updated_at = :now "
        f"WHERE {pending_slot(job.dedupe_scope)} = :key AND status = 'pending' AND type = :type",
        {"data": row["data"], "now": row["updated_at"], "key": job.dedupe_key, "type": job.type},
    )
    return EnqueueResult(None, coalesced=cur.rowcount == 1)


def enqueue(conn: sqlite3.Connection, job: NewJob, row: dict[str, Any]) -> EnqueueResult:
    if job.dedupe_key is not None:
        check_scope(conn, job)
    if insert(conn, row):
        return EnqueueResult(row["id"])
    return slot_taken(conn, job, row)


# -- claiming ---------------------------------------------------------------------------------
# Flow control: a job with a concurrency key is a candidate only while fewer than its limit
# hold the key: the active jobs, plus the due jobs of its type ahead of it in line (those
# the same statement claims first). Writes are serialised, so the count is exact. A full
# key is found by the first count alone, so a held-back job costs a read per poll, no write.
_ACTIVE_OF_KEY = (
    f"(SELECT count(*) FROM {JOBS} AS f WHERE f.concurrency_key = c.concurrency_key"
    " AND f.status = 'active')"
)
KEY_HAS_ROOM = (
    f"(c.concurrency_key IS NULL OR ({_ACTIVE_OF_KEY} < c.concurrency_limit AND "
    f"{_ACTIVE_OF_KEY} + (SELECT count(*) FROM {JOBS} AS q"
    " WHERE q.concurrency_key = c.concurrency_key AND q.status = 'pending'"
    " AND q.type = c.type AND q.run_at <= :now"
    " AND (q.priority, q.run_at, q.seq) < (c.priority, c.run_at, c.seq)) < c.concurrency_limit))"
)
DUE_OF_TYPE = f"c.type = :type AND c.run_at <= :now AND {KEY_HAS_ROOM}"
"""Claim candidates: every due job of one type."""
DUE_BY_KEY = (
    f"c.seq IN (SELECT k.seq FROM {JOBS} AS k WHERE k.pending_slot = :key OR k.live_slot = :key)"
    f" AND c.type = :type AND c.run_at <= :now AND {KEY_HAS_ROOM}"
)
"""Claim candidates: the due job of one type holding ``:key`` in its pending slot."""
BY_ID = f"c.id = :job_id AND {KEY_HAS_ROOM}"
"""Claim candidates: one job by id, due or not."""
# How each kind of candidate is best found. Without statistics the planner would rather
# read every due job of the type and sort them; the claim index serves filter and order,
# so a claim reads only as many rows as it takes however long the backlog. A key is found
# through the slot indexes.
_ACCESS = {DUE_OF_TYPE: "INDEXED BY durabl_claim", DUE_BY_KEY: "NOT INDEXED", BY_ID: ""}


def claim(
    conn: sqlite3.Connection,
    candidates: str,
    params: dict[str, Any],
    limit: int,
    reserve: bool = False,
) -> list[sqlite3.Row]:
    """Claim up to ``limit`` jobs matching ``candidates`` (one of DUE_OF_TYPE, DUE_BY_KEY,
    BY_ID) in one statement; the claimed rows (with ``claim_token``) in claim order.
    ``params`` holds the candidates' parameters and the claim's ``now`` and ``owner``.
    ``reserve`` marks them claimed ahead of a free worker (see :mod:`durabl.model.rules`)."""
    rows = conn.execute(
        _CLAIM.format(
            candidates=candidates,
            index=_ACCESS[candidates],
            # A pending row is never reserved (leaving "active" clears it): only set it.
            reserve=", reserved = 1" if reserve else "",
        ),
        {**params, "limit": limit},
    ).fetchall()
    rows.sort(key=lambda r: (r["priority"], r["run_at"], r["seq"]))
    return rows


# -- fenced writes ----------------------------------------------------------------------------
def add_logs(conn: sqlite3.Connection, job_id: str, logs: Sequence[LogEntry]) -> None:
    """Append ``logs``, dropping the oldest past MAX_LOG_ENTRIES."""
    if not logs:
        return
    last = conn.execute(
        f"SELECT coalesce(max(seq), 0) FROM {LOGS} WHERE job_id = ?", (job_id,)
    ).fetchone()[0]
    conn.executemany(
        f"INSERT INTO {LOGS} (job_id, seq, at, message) VALUES (?, ?, ?, ?)",
        codec.log_rows(job_id, last + 1, logs),
    )
    newest = last + len(logs)
    if newest > MAX_LOG_ENTRIES:
        conn.execute(
            f"DELETE FROM {LOGS} WHERE job_id = ? AND seq <= ?", (job_id, newest - MAX_LOG_ENTRIES)
        )


def add_receipt(conn: sqlite3.Connection, job_id: str, token: str, op: str, result: str) -> None:
    """Remember what (token, op) did, keeping the newest RECEIPTS_KEPT per job."""
    n = conn.execute(
        f"INSERT OR REPLACE INTO {RECEIPTS} (job_id, token, op, result, n) VALUES (:job_id, "
        f":token, :op, :result, (SELECT coalesce(max(n), 0) + 1 FROM {RECEIPTS} "
        "WHERE job_id = :job_id)) RETURNING n",
        {"job_id": job_id, "token": token, "op": op, "result": result},
    ).fetchone()[0]
    if n > RECEIPTS_KEPT:
        conn.execute(
            f"DELETE FROM {RECEIPTS} WHERE job_id = ? AND n <= ?", (job_id, n - RECEIPTS_KEPT)
        )


def resolve_miss(conn: sqlite3.Connection, job_id: str, token: str, op: str) -> JobResult:
    """Why a fenced write matched nothing: its own earlier result, a terminal job, a lost
    lease, or no job at all."""
    job = conn.execute(f"SELECT status, done_token FROM {JOBS} WHERE id = ?", (job_id,)).fetchone()
    if job is None:
        return rules.resolve_miss(None, None)
    if op == "complete" and job["status"] == "completed" and job["done_token"] == token:
        return rules.resolve_miss("completed", "completed")  # this completion, repeated
    receipt = conn.execute(
        f"SELECT result FROM {RECEIPTS} WHERE job_id = ? AND token = ? AND op = ?",
        (job_id, token, op),
    ).fetchone()
    return rules.resolve_miss(job["status"], receipt["result"] if receipt else None)


def set_terminal(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    status: str,
    extra: str = "",
    fence: str = FENCE,
) -> bool:
    """End the job in ``status`` (freeing every slot and the lease) if ``fence`` holds."""
    cur = conn.execute(
        f"UPDATE {JOBS} SET {TERMINAL}{extra} WHERE {fence}", {**params, "status": status}
    )
    return cur.rowcount == 1


def to_pending_or_supersede(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    extra: str,
    result: ResultStatus,
    fence: str = FENCE,
) -> ResultStatus | None:
    """Back to pending (``result``); ``superseded`` when a follower already holds the
    pending slot; None when ``fence`` does not hold."""
    try:
        cur = conn.execute(f"UPDATE {JOBS} SET {BACK_TO_PENDING}{extra} WHERE {fence}", params)
    except sqlite3.IntegrityError:
        superseded = {**params, "outcome": "superseded"}
        return "superseded" if set_terminal(conn, superseded, "superseded", fence=fence) else None
    return result if cur.rowcount == 1 else None


def complete(conn: sqlite3.Connection, params: dict[str, Any]) -> bool:
    """Complete the job if the fence holds. No receipt row: the row keeps the claim token
    (``done_token``), which answers a repeat of this completion (see :func:`resolve_miss`)."""
    return set_terminal(conn, params, "completed", ", done_token = :token, result = :result")


def complete_many(
    conn: sqlite3.Connection, completions: Sequence[Completion], now: int
) -> list[JobResult]:
    """Complete each job whose fence holds (with its logs); for the others, why not (see
    :func:`resolve_miss`)."""
    results: list[JobResult] = []
    for c in completions:
        result = None if c.result is None else codec.encode_payload(c.result)
        params = {"id": c.job_id, "token": c.token, "now": now, "result": result}
        params.update(ending("completed"))
        if not complete(conn, params):
            results.append(resolve_miss(conn, c.job_id, c.token, "complete"))
            continue
        add_logs(conn, c.job_id, c.logs)
        results.append(JobResult("completed"))
    return results


def fail(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    reason: str,
    retry_at: int,
    exhausted: str = "retries-exhausted",
    *,
    error: str | None = None,
    terminal_outcome: AttemptOutcome = "failed",
) -> ResultStatus | None:
    """Retry at ``retry_at`` while attempts remain, else fail with failure kind
    ``exhausted``; the attempt count is read under the write lock, so it cannot change in
    between."""
    row = conn.execute(
        f"SELECT attempts, max_attempts, cancel_requested FROM {JOBS} WHERE {FENCE}", params
    ).fetchone()
    if row is None:
        return None
    if row["cancel_requested"] is not None:  # not back to pending: it was cancelled
        return end_cancelled(conn, params, row["cancel_requested"])
    values = {**params, "reason": reason, "retry_at": retry_at, "kind": exhausted}
    if row["attempts"] >= row["max_attempts"]:
        extra = ", fail_reason = :reason, failure_kind = :kind"
        values.update(ending(terminal_outcome, error))
        return "failed-terminal" if set_terminal(conn, values, "failed", extra) else None
    extra = ", run_at = :retry_at, fail_reason = :reason"
    values.update(ending("retry-scheduled", error))
    return to_pending_or_supersede(conn, values, extra, "retry-scheduled")


# -- cancelling -------------------------------------------------------------------------------
# Each is completed by the selection: one job (``id = :id``) or a filter's WHERE clause.
_CANCEL_PENDING = (
    f"UPDATE {JOBS} SET status = 'cancelled', updated_at = :now, finished_at = :now, "
    "live_slot = NULL, pending_slot = NULL, active_slot = NULL, fail_reason = :reason "
    "WHERE status = 'pending' AND "
)
_REQUEST_CANCEL = (
    f"UPDATE {JOBS} SET cancel_requested = :reason "
    "WHERE status = 'active' AND cancel_requested IS NULL AND "
)
_RUN_NOW = (
    f"UPDATE {JOBS} SET run_at = :now, updated_at = :now "
    "WHERE status = 'pending' AND run_at > :now AND "
)
_BY_ID = "id = :id"


def cancel(conn: sqlite3.Connection, job_id: str, reason: str, now: int) -> CancelOutcome:
    """Cancel a pending job, or request it of an active one (see ``Backend.cancel``)."""
    params = {"id": job_id, "reason": reason, "now": now}
    if conn.execute(_CANCEL_PENDING + _BY_ID, params).rowcount == 1:
        return "cancelled"
    if conn.execute(_REQUEST_CANCEL + _BY_ID, params).rowcount == 1:
        return "requested"
    return "not-cancellable"


def cancel_matching(
    conn: sqlite3.Connection, where: str, params: dict[str, Any], reason: str, now: int
) -> int:
    """:func:`cancel` every job ``where`` selects: one statement for the pending ones, one
    for the active ones; how many were cancelled or requested."""
    values = {**params, "reason": reason, "now": now}
    cancelled = conn.execute(f"{_CANCEL_PENDING}({where})", values).rowcount
    return cancelled + conn.execute(f"{_REQUEST_CANCEL}({where})", values).rowcount


def run_now(conn: sqlite3.Connection, job_id: str, now: int) -> bool:
    """Make the pending job ``job_id`` due ``now`` if it is delayed; False if not pending."""
    if conn.execute(_RUN_NOW + _BY_ID, {"id": job_id, "now": now}).rowcount == 1:
        return True
    row = conn.execute(f"SELECT 1 FROM {JOBS} WHERE id = ? AND status = 'pending'", (job_id,))
    return row.fetchone() is not None


def run_now_matching(conn: sqlite3.Connection, where: str, params: dict[str, Any], now: int) -> int:
    """Make every delayed pending job ``where`` selects due ``now``; how many."""
    return conn.execute(f"{_RUN_NOW}({where})", {**params, "now": now}).rowcount


def requested_cancel(
    conn: sqlite3.Connection, params: dict[str, Any], fence: str = FENCE
) -> str | None:
    """The cancellation reason of the claim ``fence`` selects, if one was requested."""
    row = conn.execute(f"SELECT cancel_requested FROM {JOBS} WHERE {fence}", params).fetchone()
    return None if row is None else row["cancel_requested"]


def end_cancelled(
    conn: sqlite3.Connection, params: dict[str, Any], reason: str | None, fence: str = FENCE
) -> ResultStatus | None:
    """End the claim as ``cancelled`` (``reason`` its fail reason and the attempt's error)."""
    reason = rules.cancelled_reason(reason)
    values = {**params, "reason": reason, **ending("cancelled", reason)}
    done = set_terminal(conn, values, "cancelled", ", fail_reason = :reason", fence)
    return "cancelled" if done else None


def append_journal(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    records: Sequence[Mapping[str, Any]],
    position: int,
) -> bool:
    """Append ``records`` to the journal of the claim ``params`` fences, when it holds
    exactly ``position`` entries. True when the journal then holds them (a repeat of an
    append that already applied counts); False when the fence does not hold."""
    row = conn.execute(f"SELECT journal FROM {JOBS} WHERE {FENCE}", params).fetchone()
    if row is None:
        return False
    journal: list[Any] = list(decode_journal(row["journal"]))
    if len(journal) != position:
        # Only the claim holder appends: entries past ``position`` are this append.
        return len(journal) >= position + len(records)
    journal.extend(records)
    text = codec.encode_payload(journal)
    conn.execute(f"UPDATE {JOBS} SET journal = :journal WHERE {FENCE}", {**params, "journal": text})
    return True


# -- recovery and operations ------------------------------------------------------------------
def reap_one(conn: sqlite3.Connection, row: sqlite3.Row, params: dict[str, Any]) -> str | None:
    """Reap one expired lease as :func:`rules.reap_decision` says, fenced on its token and on the
    lease still being expired (``:cutoff``): ``stalled``, ``recovered``, ``superseded`` or None."""
    values = {**params, "id": row["id"], "token": row["claim_token"]}
    fence = f"{FENCE} AND heartbeat_at < :cutoff"
    decision = rules.reap_decision(
        row["attempts"],
        row["max_attempts"],
        reserved=bool(row["reserved"]),
        unstarted_reaps=row["unstarted_reaps"],
        cancel_requested=row["cancel_requested"] is not None,
    )
    if decision == "cancel":  # its worker is gone: cancelled now
        return "recovered" if end_cancelled(conn, values, row["cancel_requested"], fence) else None
    if decision == "stall":
        values["reason"] = rules.STALLED_REASON
        values.update(ending("stalled", rules.STALLED_REASON))
        extra = ", fail_reason = :reason, failure_kind = 'stalled'"
        return "stalled" if set_terminal(conn, values, "failed", extra, fence) else None
    values.update(ending("lease-lost", rules.STALLED_REASON))
    extra = ", run_at = :now"
    if decision == "refund":
        extra += ", attempts = attempts - 1, unstarted_reaps = unstarted_reaps + 1"
    moved = to_pending_or_supersede(conn, values, extra, "released", fence)
    if moved is None:
        return None
    return "superseded" if moved == "superseded" else "recovered"


def mark_started(conn: sqlite3.Connection, tokens: Sequence[str]) -> None:
    """Record that the reserved claims holding ``tokens`` started their handlers (a claim
    token is random per claim, so it alone fences the write)."""
    for start in range(0, len(tokens), 500):
        chunk = tuple(tokens[start : start + 500])
        marks = ", ".join("?" * len(chunk))
        conn.execute(
            f"UPDATE {JOBS} SET reserved = 0 "
            f"WHERE claim_token IN ({marks}) AND status = 'active' AND reserved = 1",
            chunk,
        )


def retry(conn: sqlite3.Connection, job_id: str, now: int) -> bool:
    """failed -> pending with attempts 0, due ``now``, taking its key back; False when the
    job is not failed or its key is live (under either scope)."""
    row = conn.execute(
        f"SELECT dedupe_key, dedupe_scope FROM {JOBS} WHERE id = ? AND status = 'failed'",
        (job_id,),
    ).fetchone()
    if row is None:
        return False
    params: dict[str, Any] = {"id": job_id, "now": now, "key": row["dedupe_key"]}
    take_slot = ""
    if row["dedupe_key"] is not None:
        scope = row["dedupe_scope"] or "pending+active"
        other = conn.execute(
            f"SELECT 1 FROM {JOBS} WHERE {other_scope_filter(scope)} LIMIT 1", params
        ).fetchone()
        if other is not None:
            return False
        take_slot = f", {pending_slot(scope)} = :key"
    try:
        cur = conn.execute(
            f"UPDATE {JOBS} SET status = 'pending', attempts = 0, run_at = :now, "
            f"updated_at = :now, failure_kind = NULL, finished_at = NULL{take_slot} "
            "WHERE id = :id AND status = 'failed'",
            params,
        )
    except sqlite3.IntegrityError:
        return False  # the key is live again under the same scope
    return cur.rowcount == 1
