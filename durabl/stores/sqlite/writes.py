"""The statements of the SQLite store that write (``:name`` parameters, instants in epoch
milliseconds), named for the shared flows of :mod:`durabl.stores.sql` as
:data:`STATEMENTS`, and the steps SQLite writes in its own way (a new job's row, logs).

Writes are serialised (one ``BEGIN IMMEDIATE`` transaction at a time), so no key needs a
lock of its own, and a count read in a write transaction stays exact until it commits.
Dedupe rests on the unique partial indexes over the three slot columns: an insert that
would take a held slot does nothing, and a move of a slot back to ``pending_slot`` that a
follower already holds fails on the index (SQLite then undoes just that statement, the
transaction carries on) and the run is superseded instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from durabl.model.job import LogEntry
from durabl.model.options import MAX_LOG_ENTRIES, NewJob
from durabl.stores.sql.rows import new_job_params
from durabl.stores.sql.statements import Statements
from durabl.stores.sqlite import codec
from durabl.stores.sqlite.queries import JOB_COLUMNS, JOBS, LOGS, READS, RECEIPTS
from durabl.stores.sqlite.schema import (
    PAUSED_TYPES_TABLE,
    RATE_LIMITS_TABLE,
    SCHEDULES_TABLE,
    SIGNALS_TABLE,
    SUBSCRIPTIONS_TABLE,
    WORKERS_TABLE,
)

FENCE = "id = :id AND claim_token = :token AND status = 'active'"
"""The claim fence every write after a claim carries."""
_CLEAR_LEASE = (
    "claim_token = NULL, heartbeat_at = NULL, claimed_at = NULL, lease_owner = NULL, reserved = 0"
)
# The claim that ends adds its entry to the history (the newest :kept kept) in the
# statement that records its outcome: SET reads the row as it was, lease fields included.
_ADD_ATTEMPT = (
    "attempt_history = json_insert(CASE WHEN json_array_length(coalesce(attempt_history, "
    "'[]')) >= :kept THEN json_remove(attempt_history, '$[0]') ELSE coalesce(attempt_history, "
    "'[]') END, '$[#]', json_object('n', attempts, 'w', lease_owner, 's', claimed_at, "
    "'e', :now, 'o', :outcome, 'x', :error))"
)
_TERMINAL = (
    "status = :status, updated_at = :now, finished_at = :now, cancel_requested = NULL, "
    f"live_slot = NULL, pending_slot = NULL, active_slot = NULL, {_ADD_ATTEMPT}, {_CLEAR_LEASE}"
)
COMPLETE = f"UPDATE {JOBS} SET {_TERMINAL}, done_token = :token, result = :result WHERE {FENCE}"
"""One job completed (``:status`` 'completed'): each completion of a batch is its own
statement (writes are serialised: a batch statement would gain nothing here)."""

# One statement claims the whole batch. Candidates are due pending jobs in claim order,
# skipping a pending-scope follower whose key already has an active run, so the unique
# index on active_slot never fires here, and the jobs of a paused type (a probe of the
# paused types' primary key: no statement more per claim). Each row gets its own token.
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
      AND NOT EXISTS (SELECT 1 FROM {PAUSED_TYPES_TABLE} AS z WHERE z.type = c.type)
    ORDER BY c.priority, c.run_at, c.seq
    LIMIT :limit)
RETURNING {JOB_COLUMNS}, claim_token
"""
# Flow control: a job with a concurrency key is a candidate only while fewer than its limit
# hold the key: the active jobs, plus the due jobs of its type ahead of it in line (those
# the same statement claims first). Writes are serialised, so the count is exact. A full
# key is found by the first count alone, so a held-back job costs a read per poll, no write.
_ACTIVE_OF_KEY = (
    f"(SELECT count(*) FROM {JOBS} AS f WHERE f.concurrency_key = c.concurrency_key"
    " AND f.status = 'active')"
)
_KEY_HAS_ROOM = (
    f"(c.concurrency_key IS NULL OR ({_ACTIVE_OF_KEY} < c.concurrency_limit AND "
    f"{_ACTIVE_OF_KEY} + (SELECT count(*) FROM {JOBS} AS q"
    " WHERE q.concurrency_key = c.concurrency_key AND q.status = 'pending'"
    " AND q.type = c.type AND q.run_at <= :now"
    " AND (q.priority, q.run_at, q.seq) < (c.priority, c.run_at, c.seq)) < c.concurrency_limit))"
)
_DUE_OF_TYPE = f"c.type = :type AND c.run_at <= :now AND {_KEY_HAS_ROOM}"
_DUE_BY_KEY = (
    f"c.seq IN (SELECT k.seq FROM {JOBS} AS k WHERE k.pending_slot = :key OR k.live_slot = :key)"
    f" AND c.type = :type AND c.run_at <= :now AND {_KEY_HAS_ROOM}"
)
_BY_ID = f"c.id = :job_id AND {_KEY_HAS_ROOM}"


def _claim(candidates: str, index: str = "", reserve: bool = False) -> str:
    """The claim of ``candidates``, found as ``index`` says: without statistics the
    planner would rather read every due job of the type and sort them; the claim index
    serves filter and order, so a claim reads only as many rows as it takes however long
    the backlog. ``reserve``: claimed ahead of a free worker (a pending row is never
    reserved: leaving "active" clears it, so only set it)."""
    return _CLAIM.format(
        candidates=candidates, index=index, reserve=", reserved = 1" if reserve else ""
    )


CLAIM_DUE_RESERVED = _claim(_DUE_OF_TYPE, "INDEXED BY durabl_claim", reserve=True)
"""The claim of due jobs read ahead: a second statement after the claim of those that
start now (PostgreSQL marks both in one statement)."""

_INSERT_COLUMNS = (
    "id", "type", "data", "status", "priority", "run_at", "attempts", "max_attempts",
    "dedupe_key", "dedupe_scope", "live_slot", "pending_slot", "created_at", "updated_at",
    "backoff", "backoff_delay", "backoff_max_delay", "claim_token", "heartbeat_at",
    "claimed_at", "lease_owner", "concurrency_key", "concurrency_limit", "trace_context",
    "timeout", "parent_id", "parent_step",
)  # fmt: skip
_INSERT = f"INSERT INTO {JOBS} ({', '.join(_INSERT_COLUMNS)}) VALUES "
# The values of a job created already claimed (``claim_or_enqueue``'s inline run).
_CLAIMED = {
    "status": "'active'",
    "attempts": "1",
    "claim_token": ":token",
    "heartbeat_at": ":now",
    "claimed_at": ":now",
    "lease_owner": ":owner",
}
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
_CLAIM_ROW = "attempts, max_attempts, reserved, unstarted_reaps, cancel_requested"
_RATE = "max_starts, per_ms, window_start, started, :now AS now_ms"

# A taken slot's pending holder (rules.HolderUpdate, rules.debounced_run_at): instants are
# integer milliseconds, and SQLite's min() and max() of a NULL are NULL, so a NULL push_to
# leaves run_at as it is.
_UPDATE_HOLDER = (
    f"UPDATE {JOBS} SET data = coalesce(:data, data), run_at = coalesce(max(run_at, "
    "min(:push_to, coalesce(created_at + :within_ms, :push_to))), run_at), updated_at = :now"
)
_HELD_PENDING = "status = 'pending' AND type = :type"

STATEMENTS = Statements(
    # Writes are serialised: no key lock, and never a repeat of a write that may have
    # committed (a retry only follows a lock that was never had).
    lock_key=None,
    scope_of_live=f"SELECT dedupe_scope FROM {JOBS} WHERE live_slot = :key LIMIT 1",
    scope_of_pending_or_active=(
        f"SELECT dedupe_scope FROM {JOBS} WHERE (pending_slot = :key OR active_slot = :key) LIMIT 1"
    ),
    # Any conflict is a dedupe slot (ids are random): the insert then simply does nothing.
    insert_pending=(
        f"{_INSERT}({', '.join(':' + c for c in _INSERT_COLUMNS)}) ON CONFLICT DO NOTHING"
    ),
    lock_keys=None,
    scope_in_batch=(
        f"SELECT dedupe_key, dedupe_scope FROM {JOBS} "
        "WHERE live_slot IN (SELECT value FROM json_each(:pending_keys)) "
        "OR pending_slot IN (SELECT value FROM json_each(:live_keys)) "
        "OR active_slot IN (SELECT value FROM json_each(:live_keys)) LIMIT 1"
    ),
    job_exists=None,
    update_holder_live=f"{_UPDATE_HOLDER} WHERE live_slot = :key AND {_HELD_PENDING}",
    update_holder_pending=f"{_UPDATE_HOLDER} WHERE pending_slot = :key AND {_HELD_PENDING}",
    insert_active=(
        f"INSERT INTO {JOBS} ({', '.join(_INSERT_COLUMNS)}) SELECT "
        f"{', '.join(_CLAIMED.get(c, ':' + c) for c in _INSERT_COLUMNS)} WHERE NOT EXISTS "
        f"(SELECT 1 FROM {PAUSED_TYPES_TABLE} WHERE type = :type) "
        f"ON CONFLICT DO NOTHING RETURNING {JOB_COLUMNS}"
    ),
    claim_due=_claim(_DUE_OF_TYPE, "INDEXED BY durabl_claim"),
    claim_by_key=_claim(_DUE_BY_KEY, "NOT INDEXED"),  # found through the slot indexes
    claim_by_id=_claim(_BY_ID),
    heartbeat=f"UPDATE {JOBS} SET heartbeat_at = :now WHERE {FENCE} RETURNING cancel_requested",
    # No follower check: the unique index refuses the move (see the module docstring).
    lock_claim=f"SELECT {_CLAIM_ROW}, NULL AS followed FROM {JOBS} WHERE {FENCE}",
    terminal=(
        f"UPDATE {JOBS} SET {_TERMINAL}, fail_reason = coalesce(:reason, fail_reason), "
        f"failure_kind = :kind WHERE {FENCE}"
    ),
    # Back to pending: a pending-scope job moves its active slot back to the pending slot
    # (a follower holding that slot makes this fail on the unique index); the live slot
    # stays.
    to_pending=(
        f"UPDATE {JOBS} SET status = 'pending', updated_at = :now, pending_slot = active_slot, "
        f"active_slot = NULL, {_ADD_ATTEMPT}, {_CLEAR_LEASE}, attempts = attempts - :refund, "
        "unstarted_reaps = unstarted_reaps + :unstarted, "
        "run_at = CASE WHEN :due_now THEN :now ELSE coalesce(:run_at, run_at) END, "
        f"fail_reason = coalesce(:reason, fail_reason) WHERE {FENCE}"
    ),
    resolve_miss=(
        f"SELECT j.status, j.done_token, (SELECT r.result FROM {RECEIPTS} AS r "
        "WHERE r.job_id = j.id AND r.token = :token AND r.op = :op) AS receipt "
        f"FROM {JOBS} AS j WHERE j.id = :id"
    ),
    add_receipt=(
        f"INSERT OR REPLACE INTO {RECEIPTS} (job_id, token, op, result, n) VALUES (:id, "
        f":token, :op, :result, (SELECT coalesce(max(n), 0) + 1 FROM {RECEIPTS} "
        "WHERE job_id = :id)) RETURNING n"
    ),
    trim_receipts=f"DELETE FROM {RECEIPTS} WHERE job_id = :id AND n <= :n",
    # The journal is JSON text: records are appended to its text, as on PostgreSQL. ('[]':
    # what an empty append at position 0 once stored.)
    append_journal=(
        f"UPDATE {JOBS} SET journal = CASE WHEN journal IS NULL OR journal = '[]' "
        "THEN :journal ELSE substr(journal, 1, length(journal) - 1) || ',' || "
        f"substr(:journal, 2) END WHERE {FENCE} "
        "AND coalesce(json_array_length(journal), 0) = :position"
    ),
    journal_len=(
        f"SELECT coalesce(json_array_length(journal), 0) AS journal_len FROM {JOBS} WHERE {FENCE}"
    ),
    expired=(
        f"SELECT id, claim_token, {_CLAIM_ROW}, NULL AS followed FROM {JOBS} "
        "INDEXED BY durabl_lease WHERE status = 'active' AND heartbeat_at < :cutoff "
        "ORDER BY heartbeat_at, seq LIMIT :limit"
    ),
    cancel_pending=_CANCEL_PENDING + "id = :id",
    request_cancel=_REQUEST_CANCEL + "id = :id",
    cancel_pending_matching=_CANCEL_PENDING + "({where})",
    request_cancel_matching=_REQUEST_CANCEL + "({where})",
    run_now=_RUN_NOW + "id = :id",
    run_now_matching=_RUN_NOW + "({where})",
    pending_exists=f"SELECT 1 FROM {JOBS} WHERE id = :id AND status = 'pending'",
    failed_for_retry=(
        f"SELECT dedupe_key, dedupe_scope FROM {JOBS} WHERE id = :id AND status = 'failed'"
    ),
    slot_held=None,  # the unique index refuses the retry's slot instead
    retry=(
        f"UPDATE {JOBS} SET status = 'pending', attempts = 0, run_at = :now, "
        "updated_at = :now, failure_kind = NULL, finished_at = NULL, "
        "live_slot = CASE WHEN :slot = 'live' THEN :key ELSE live_slot END, "
        "pending_slot = CASE WHEN :slot = 'pending' THEN :key ELSE pending_slot END "
        "WHERE id = :id AND status = 'failed'"
    ),
    delete=f"DELETE FROM {JOBS} WHERE id = :id AND status != 'active'",
    matching_ids=f"SELECT id FROM {JOBS} WHERE {{where}} ORDER BY seq",
    delete_matching=f"DELETE FROM {JOBS} WHERE ({{where}}) AND status != 'active'",
    count_jobs=f"SELECT count(*) AS n FROM {JOBS} WHERE {{where}}",
    count_jobs_at_most=(
        f"SELECT count(*) AS n FROM (SELECT 1 FROM {JOBS} WHERE {{where}} LIMIT :at_most)"
    ),
    get_job=f"SELECT {JOB_COLUMNS} FROM {JOBS} WHERE id = :id",
    has_outstanding=(
        f"SELECT 1 FROM {JOBS} WHERE type = :type AND "
        "(live_slot = :key OR pending_slot = :key OR active_slot = :key) LIMIT 1"
    ),
    rate_upsert=(
        f"INSERT INTO {RATE_LIMITS_TABLE} (type, max_starts, per_ms) VALUES (:type, :limit, "
        ":per) ON CONFLICT (type) DO UPDATE SET max_starts = excluded.max_starts, "
        "per_ms = excluded.per_ms"
    ),
    rate_delete=f"DELETE FROM {RATE_LIMITS_TABLE} WHERE type = :type",
    rate_types=f"SELECT type FROM {RATE_LIMITS_TABLE}",
    rate_read=f"SELECT {_RATE} FROM {RATE_LIMITS_TABLE} WHERE type = :type",
    rate_lock=f"SELECT {_RATE} FROM {RATE_LIMITS_TABLE} WHERE type = :type",  # serialised
    rate_count=(
        f"UPDATE {RATE_LIMITS_TABLE} SET started = CASE WHEN window_start = :w "
        "THEN started + :n ELSE :n END, window_start = :w WHERE type = :type"
    ),
    upsert_schedule=(
        f"INSERT INTO {SCHEDULES_TABLE} (name, definition, next_run_at) "
        "VALUES (:name, :definition, :next) ON CONFLICT (name) DO UPDATE SET "
        "definition = excluded.definition, next_run_at = excluded.next_run_at "
        f"WHERE {SCHEDULES_TABLE}.definition <> excluded.definition"
    ),
    load_schedules=(
        "SELECT name, definition, next_run_at, last_run_at, last_job_id, paused "
        f"FROM {SCHEDULES_TABLE} ORDER BY name"
    ),
    delete_schedule=f"DELETE FROM {SCHEDULES_TABLE} WHERE name = :name",
    advance_schedule=(
        f"UPDATE {SCHEDULES_TABLE} SET next_run_at = :next, "
        "last_run_at = coalesce(:last, last_run_at) "
        "WHERE name = :name AND next_run_at = :expected AND definition = :definition "
        "AND paused = 0"
    ),
    schedule_last_job=f"UPDATE {SCHEDULES_TABLE} SET last_job_id = :job_id WHERE name = :name",
    pause_schedule=(
        f"UPDATE {SCHEDULES_TABLE} SET paused = :paused, "
        "next_run_at = coalesce(:next, next_run_at) WHERE name = :name"
    ),
    pause_type=(
        f"INSERT INTO {PAUSED_TYPES_TABLE} (type, paused_at) VALUES (:type, :now) "
        "ON CONFLICT (type) DO NOTHING"
    ),
    resume_type=f"DELETE FROM {PAUSED_TYPES_TABLE} WHERE type = :type",
    paused_types=f"SELECT type FROM {PAUSED_TYPES_TABLE}",
    type_paused=f"SELECT 1 FROM {PAUSED_TYPES_TABLE} WHERE type = :type",
    upsert_worker=(
        f"INSERT INTO {WORKERS_TABLE} (id, host, pid, concurrency, started_at, last_seen, "
        "active, heartbeat_interval) VALUES (:id, :host, :pid, :concurrency, :started_at, "
        ":last_seen, :active, :heartbeat_interval) ON CONFLICT (id) DO UPDATE SET "
        "host = excluded.host, pid = excluded.pid, concurrency = excluded.concurrency, "
        "started_at = excluded.started_at, last_seen = excluded.last_seen, "
        "active = excluded.active, heartbeat_interval = excluded.heartbeat_interval"
    ),
    load_workers=(
        "SELECT id, host, pid, concurrency, started_at, last_seen, active, "
        f"heartbeat_interval FROM {WORKERS_TABLE} ORDER BY id"
    ),
    delete_worker=f"DELETE FROM {WORKERS_TABLE} WHERE id = :id",
    prune_workers=f"DELETE FROM {WORKERS_TABLE} WHERE last_seen < :before",
    upsert_subscription=(
        f"INSERT INTO {SUBSCRIPTIONS_TABLE} (event, type) VALUES (:event, :type) "
        "ON CONFLICT (event, type) DO NOTHING"
    ),
    load_subscriptions=f"SELECT event, type FROM {SUBSCRIPTIONS_TABLE}",
    load_event_subscriptions=f"SELECT event, type FROM {SUBSCRIPTIONS_TABLE} WHERE event = :event",
    delete_subscription=(
        f"DELETE FROM {SUBSCRIPTIONS_TABLE} WHERE event = :event AND type = :type"
    ),
    store_signal=(
        f"INSERT INTO {SIGNALS_TABLE} (job_id, name, data, sent_at) "
        "SELECT :job_id, :name, :data, :sent_at WHERE EXISTS "
        f"(SELECT 1 FROM {JOBS} WHERE id = :job_id AND status IN ('pending', 'active')) "
        "RETURNING seq"
    ),
    next_signal=(
        f"SELECT seq, name, data, sent_at FROM {SIGNALS_TABLE} "
        "WHERE job_id = :job_id AND name = :name AND seq > :after ORDER BY seq LIMIT 1"
    ),
    **READS,
)


def new_row(job: NewJob, now: int) -> dict[str, Any]:
    """Every column of a new pending job (and ``now``); its payload encoded here, outside
    any transaction."""
    row = new_job_params(job, now if job.run_at is None else codec.to_ms(job.run_at))
    row.update(
        status="pending",
        attempts=0,
        created_at=now,
        updated_at=now,
        claim_token=None,
        heartbeat_at=None,
        claimed_at=None,
        lease_owner=None,
        now=now,
    )
    return row


def add_logs(conn: sqlite3.Connection, job_id: str, logs: Sequence[LogEntry]) -> None:
    """Append ``logs`` to one job's, numbered after its last, dropping the oldest past
    MAX_LOG_ENTRIES."""
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
