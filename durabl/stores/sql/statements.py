"""What the shared SQL store (:class:`~durabl.stores.sql.store.SqlStore`) asks of a dialect:
the statements it names, and the two driver calls it makes on them.

A dialect (SQLite, PostgreSQL) writes each statement in its own SQL, parameter style and
value representation, and hands the set over once, rendered, as a :class:`Statements`.
The store never builds SQL: it runs ``tx.execute(statement, params)`` and reads the
result as the statement's entry below says: ``-> count`` (``rowcount``: the rows written,
or returned by a statement that ends in a SELECT), ``-> row`` (``fetchone()``, None when
nothing matched) or ``-> rows`` (``fetchall()``). Parameter names are the same in every
dialect. ``fence`` stands for the parameters of a claim's fence (``SqlStore._fence``),
``ending`` for the attempt's ending: ``outcome``, ``error`` and ``kept`` (how many
entries a history keeps). ``{where}`` marks where a listing filter's clause goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


class Result(Protocol):
    """What a statement leaves to read (a ``sqlite3.Cursor``, a psycopg cursor)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Tx(Protocol):
    """Where statements run: a SQLite connection inside its transaction, a psycopg cursor.
    Rows are read by column name."""

    def execute(self, statement: str, params: Mapping[str, Any], /) -> Result: ...


C = TypeVar("C", bound=Tx)


@dataclass(frozen=True)
class Statements:
    """Every statement the shared flows run, by name. ``None`` where a dialect needs no
    such step (the entry says which and why)."""

    # -- enqueue ------------------------------------------------------------------------
    #: (key) Serialise, until the transaction ends, with every write taking the key.
    #: PostgreSQL (an advisory lock); None on SQLite, whose writes are serialised already.
    lock_key: str | None
    #: (key) -> row(dedupe_scope): a job holding the key in its live slot.
    scope_of_live: str
    #: (key) -> row(dedupe_scope): a job holding the key in its pending or active slot.
    scope_of_pending_or_active: str
    #: (a new job's row) -> count: 0 when a dedupe slot is taken.
    insert_pending: str
    #: (id) -> row: the job exists. PostgreSQL repeats an enqueue after a lost connection
    #: (its insert may have committed); None on SQLite, which never repeats a write then.
    job_exists: str | None
    #: (data, push_to, within_ms, now, key, type) -> count: update the pending holder of
    #: the key in its live slot, of the same type (``durabl.model.rules.HolderUpdate``):
    #: its payload becomes ``data`` unless that is NULL; unless ``push_to`` is NULL its
    #: run_at becomes ``push_to``, at most ``created_at`` + ``within_ms`` (NULL: no bound),
    #: as ``rules.debounced_run_at`` says.
    update_holder_live: str
    #: As ``update_holder_live`` for the pending slot.
    update_holder_pending: str
    #: (a new job's row, token, owner) -> row (the job's columns): the job created
    #: already claimed; no row when a dedupe slot is taken or its type is paused.
    insert_active: str

    # -- bulk enqueue: a batch's keys are list parameters (``SqlStore._key_list``) --------
    #: (keys) Serialise with every write taking one of the keys, as ``lock_key`` does for
    #: one, taking the locks in one order; None on SQLite.
    lock_keys: str | None
    #: (pending_keys, live_keys) -> row(dedupe_key, dedupe_scope): a job holding one of
    #: ``pending_keys`` in its live slot, or one of ``live_keys`` in its pending or active
    #: slot (a key of the batch live under the other scope).
    scope_in_batch: str

    # -- claims: (limit, now, owner, starting) and the candidates' own -> rows (the job's
    # columns and its claim_token), in any order; never a job of a paused type ------------
    #: (type): due jobs of one type.
    claim_due: str
    #: (type, key): the due job of one type holding the key in its pending or live slot.
    claim_by_key: str
    #: (job_id): one job, due or not.
    claim_by_id: str

    # -- writes fenced on a claim ---------------------------------------------------------
    #: (fence, now) -> row(cancel_requested): the lease renewed.
    heartbeat: str
    #: (fence) -> row(attempts, max_attempts, cancel_requested, followed): the claim, locked
    #: where the database locks rows; ``followed``: a pending follower holds its key
    #: (PostgreSQL; SQLite reads NULL and lets the unique index refuse the move instead).
    lock_claim: str
    #: (fence, now, status, reason, kind, ending) -> count: the claim ends in ``status``,
    #: every slot and the lease freed (``reason`` None keeps the stored one).
    terminal: str
    #: (fence, now, refund, unstarted, due_now, run_at, reason, ending) -> count: back to
    #: pending, its active slot back to the pending slot (``run_at`` None keeps it).
    to_pending: str
    #: (id, token, op) -> row(status, done_token, receipt): why a fenced write missed.
    resolve_miss: str
    #: (id, token, op, result) -> row(n): the write's receipt, numbered per job.
    add_receipt: str
    #: (id, n): drop the job's receipts numbered ``n`` or lower.
    trim_receipts: str
    #: (fence, journal, count, position) -> count: append ``journal`` (a JSON array of
    #: ``count`` records) when the journal holds exactly ``position`` records.
    append_journal: str
    #: (fence) -> row(journal_len).
    journal_len: str
    #: (the dialect's reap parameters) -> rows(id, claim_token, attempts, max_attempts,
    #: reserved, unstarted_reaps, cancel_requested, followed): expired leases, oldest first.
    expired: str

    # -- operations -----------------------------------------------------------------------
    #: (id, reason, now) -> count: a pending job cancelled.
    cancel_pending: str
    #: (id, reason) -> count: the cancellation of an active job requested.
    request_cancel: str
    #: ``cancel_pending`` on every job ``{where}`` selects.
    cancel_pending_matching: str
    #: ``request_cancel`` on every job ``{where}`` selects.
    request_cancel_matching: str
    #: (id, now) -> count: a delayed pending job due now.
    run_now: str
    #: ``run_now`` on every job ``{where}`` selects.
    run_now_matching: str
    #: (id) -> row: the job is pending.
    pending_exists: str
    #: (id) -> row(dedupe_key, dedupe_scope): the job is failed.
    failed_for_retry: str
    #: (slot, key) -> row: the slot (``live`` or ``pending``) is held. PostgreSQL (a unique
    #: violation would abort its transaction); None on SQLite, where the index refuses.
    slot_held: str | None
    #: (id, now, key, slot) -> count: failed -> pending, taking ``key`` in ``slot``.
    retry: str
    #: (id) -> count: the job deleted unless active.
    delete: str
    #: ``{where}`` -> rows(id), oldest first.
    matching_ids: str
    #: ``{where}`` -> count: those jobs deleted unless active.
    delete_matching: str
    #: ``{where}`` -> row(n).
    count_jobs: str
    #: ``{where}`` (at_most) -> row(n), counting no further than ``at_most``.
    count_jobs_at_most: str
    #: (id) -> row (the job's columns).
    get_job: str
    #: (type, key) -> row: a job of the type holds the key in any slot.
    has_outstanding: str
    #: -> rows(type): every type, in code point order.
    job_types: str
    #: (now, s0 ... the statuses) -> rows(status, failure_kind, n): jobs per status (its
    #: rows summed), failed ones per kind; and ``_of_type`` (type): of one type.
    stats_counts: str
    stats_counts_of_type: str
    #: (now) -> row(oldest, now): the oldest due pending job's run_at, and ``now``.
    stats_oldest: str
    stats_oldest_of_type: str
    #: -> rows(type, failure_kind, n): failed jobs per type and kind.
    stats_by_type_kinds: str

    # -- rate limits ----------------------------------------------------------------------
    #: (type, limit, per): store a type's limit (``per`` in ms).
    rate_upsert: str
    #: (type): remove it.
    rate_delete: str
    #: -> rows(type): every limited type.
    rate_types: str
    #: (type, now) -> row(max_starts, per_ms, window_start, started, now_ms).
    rate_read: str
    #: As ``rate_read``, the row locked until the transaction ends (where rows lock).
    rate_lock: str
    #: (type, w, n): count ``n`` claims in window ``w``.
    rate_count: str

    # -- schedules ------------------------------------------------------------------------
    #: (name, definition, next): stored unless the same definition already is.
    upsert_schedule: str
    #: -> rows(name, definition, next_run_at, last_run_at, last_job_id, paused), by name.
    load_schedules: str
    #: (name) -> count.
    delete_schedule: str
    #: (next, last, name, expected, definition) -> count: the compare-and-set of a firing
    #: (never of a paused schedule).
    advance_schedule: str
    #: (job_id, name).
    schedule_last_job: str
    #: (name, paused, next) -> count: pause or resume it (``next`` NULL keeps next_run_at).
    pause_schedule: str

    # -- paused types (durabl.model.pauses) -----------------------------------------------
    #: (type, now): stored unless it already is.
    pause_type: str
    #: (type) -> count: removed (PostgreSQL: and its listeners told the type is due).
    resume_type: str
    #: -> rows(type).
    paused_types: str
    #: (type) -> row: the type is paused.
    type_paused: str

    # -- the workers registry -------------------------------------------------------------
    #: (id, host, pid, concurrency, started_at, last_seen, active, heartbeat_interval).
    upsert_worker: str
    #: -> rows (those columns), by id.
    load_workers: str
    #: (id) -> count.
    delete_worker: str
    #: (before) -> count.
    prune_workers: str

    # -- event subscriptions --------------------------------------------------------------
    #: (event, type): stored unless it already is.
    upsert_subscription: str
    #: -> rows(event, type).
    load_subscriptions: str
    #: (event) -> rows(event, type).
    load_event_subscriptions: str
    #: (event, type) -> count.
    delete_subscription: str

    # -- signals --------------------------------------------------------------------------
    #: (job_id, name, data, sent_at) -> row(seq), none when the job is unknown or terminal.
    store_signal: str
    #: (job_id, name, after) -> row(seq, name, data, sent_at) of the first after ``after``.
    next_signal: str


def selecting(statement: str, where: str) -> str:
    """``statement`` with a listing filter's clause in its ``{where}``."""
    return statement.replace("{where}", where)
