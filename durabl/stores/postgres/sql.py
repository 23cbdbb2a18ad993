"""The statements of the PostgreSQL store, named in one place (as procrastinate keeps its
``queries.sql``): those that write here, the reads in :mod:`~durabl.stores.postgres.queries`;
the store calls each by name through :class:`Queries`, rendered once per set of tables.

Templates name the tables as ``{jobs}``, ``{logs}``, ``{receipts}``, and the current
instant as ``{now}``: the injected clock's time when a clock was given (``%(now)s``), else
the server's (``now()``, the start of the transaction, cut to the millisecond), so every
lease is on one clock. A few templates keep a second placeholder (``{where}``,
``{order}``, ``{source}``) filled per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from durabl.stores.postgres import queries as q
from durabl.stores.postgres.bulk import BULK_STATEMENTS
from durabl.stores.postgres.notifies import NOTIFY_WAITING, ends_runs, notify
from durabl.stores.postgres.queries import LIST_WALK, ORDER_NEWEST, READS, SEARCH, WALK_SOURCE
from durabl.stores.postgres.registry import REGISTRY_STATEMENTS
from durabl.stores.sql.statements import Statements

NOW = "coalesce(%(now)s::timestamptz, date_trunc('milliseconds', now()))"

# -- fragments ----------------------------------------------------------------------------
JOB_COLUMNS = (
    "j.seq, j.id, j.type, j.data, j.status, j.priority, j.run_at, j.attempts, "
    "j.max_attempts, j.dedupe_key, j.dedupe_scope, j.concurrency_key, j.concurrency_limit, "
    "j.created_at, j.updated_at, j.finished_at, "
    "j.fail_reason, j.failure_kind, j.backoff, j.backoff_delay, j.backoff_max_delay, "
    "j.journal, j.attempt_history, j.lease_owner, j.heartbeat_at, j.result, j.trace_context, "
    "j.timeout, j.parent_id, j.parent_step, "
    "(SELECT coalesce(json_agg(json_build_array("
    "(extract(epoch FROM l.at) * 1000)::bigint, l.message) ORDER BY l.seq), '[]'::json) "
    "FROM {logs} AS l WHERE l.job_id = j.id) AS logs"
)
"""What a :class:`~durabl.model.job.Job` is built from, its logs, lease owner and last
heartbeat included (not its token)."""

FENCE = (
    "(j.id, j.claim_token) IN (SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::text[])) "
    "AND j.status = 'active'"
)
"""The claim fence every write after a claim carries: each (id, token) pair of a batch."""
CLEAR_LEASE = (
    "claim_token = NULL, heartbeat_at = NULL, claimed_at = NULL, lease_owner = NULL, "
    "reserved = false"
)
# The claim that ends adds its entry to the history (the newest %(kept)s kept) in the
# statement that records its outcome: SET reads the row as it was, lease fields included.
ADD_ATTEMPT = (
    "attempt_history = (CASE WHEN jsonb_array_length(coalesce(j.attempt_history, "
    "'[]'::jsonb)) >= %(kept)s THEN j.attempt_history - 0 ELSE coalesce(j.attempt_history, "
    "'[]'::jsonb) END) || jsonb_build_array(jsonb_build_object('n', j.attempts, "
    "'w', j.lease_owner, 's', (extract(epoch FROM j.claimed_at) * 1000)::bigint, "
    "'e', (extract(epoch FROM {now}) * 1000)::bigint, 'o', %(outcome)s::text, "
    "'x', %(error)s::text))"
)
TERMINAL = (
    "status = %(status)s, updated_at = {now}, finished_at = {now}, live_slot = NULL, "
    "cancel_requested = NULL, "
    f"pending_slot = NULL, active_slot = NULL, {ADD_ATTEMPT}, {CLEAR_LEASE}"
)
FOLLOWED = (
    "(j.active_slot IS NOT NULL AND EXISTS "
    "(SELECT 1 FROM {jobs} AS f WHERE f.pending_slot = j.active_slot)) AS followed"
)
"""Whether a pending follower holds the key of the active job ``j`` (it is then superseded
rather than moved back to pending)."""

DUE = "c.type = %(type)s AND c.run_at <= {now}"
DUE_BY_KEY = f"{DUE} AND (c.pending_slot = %(key)s OR c.live_slot = %(key)s)"
BY_ID = "c.id = %(job_id)s"
# Flow control: a job with a concurrency key is a candidate only while fewer than its limit
# hold the key: the active jobs, plus the due jobs of its type ahead of it in line (those
# this statement claims first). A full key is found by the first count, a read: a held-back
# job is never written by a poll. The count is of the statement's snapshot, so the claim
# also takes one of the key's ``limit`` slots, which the unique index on (key, slot) over
# active jobs guards: two claimers that raced for the last slot cannot both commit.
_ACTIVE_OF_KEY = (
    "(SELECT count(*) FROM {jobs} AS f WHERE f.concurrency_key = c.concurrency_key"
    " AND f.status = 'active')"
)
KEY_HAS_ROOM = (
    f"(c.concurrency_key IS NULL OR ({_ACTIVE_OF_KEY} < c.concurrency_limit AND "
    f"{_ACTIVE_OF_KEY} + (SELECT count(*) FROM {{jobs}} AS q"
    " WHERE q.concurrency_key = c.concurrency_key AND q.status = 'pending'"
    " AND q.type = c.type AND q.run_at <= {now}"
    " AND (q.priority, q.run_at, q.seq) < (c.priority, c.run_at, c.seq)) < c.concurrency_limit))"
)
# The free slots of key ``r`` in order, the ``r.kn``-th of them for the ``kn``-th job of
# the key in the batch (none: the job is left pending).
FREE_SLOT = (
    "(SELECT s.slot FROM (SELECT g AS slot, row_number() OVER (ORDER BY g) AS rn "
    "FROM generate_series(0, r.concurrency_limit - 1) AS g WHERE NOT EXISTS ("
    "SELECT 1 FROM {jobs} AS a WHERE a.concurrency_key = r.concurrency_key "
    "AND a.status = 'active' AND a.concurrency_slot = g)) AS s WHERE s.rn = r.kn)"
)


# Cancelling: each completed by its selection, one job or a listing filter.
CANCEL_PENDING = (
    "UPDATE {jobs} AS j SET status = 'cancelled', updated_at = {now}, finished_at = {now}, "
    "live_slot = NULL, pending_slot = NULL, active_slot = NULL, fail_reason = %(reason)s "
    "WHERE j.status = 'pending' AND "
)
REQUEST_CANCEL = (
    "UPDATE {jobs} AS j SET cancel_requested = %(reason)s "
    "WHERE j.status = 'active' AND j.cancel_requested IS NULL AND "
)
# Run now: a delayed pending job becomes due (and the listeners hear of it).
RUN_NOW = (
    "WITH due AS (UPDATE {jobs} AS j SET run_at = {now}, updated_at = {now} "
    "WHERE j.status = 'pending' AND j.run_at > {now} AND ({where}) "
    "RETURNING j.id, j.type, j.run_at) SELECT due.id, " + notify("due") + " FROM due"
)

# -- claims: one statement per batch ------------------------------------------------------
# Candidates are due pending jobs in claim order, skipping a pending-scope follower whose
# key already has an active run and the jobs of a paused type (a probe of the paused
# types' primary key, in the same statement); SKIP LOCKED lets concurrent claimers take
# different rows. The paused check names the claimed type, not the row's: uncorrelated, it
# is one test before the scan, and the planner keeps costing the scan by its LIMIT. (As an
# anti-join on each row's type the estimate became the whole backlog's scan, which passed
# jit_above_cost: every claim was JIT-compiled, 1.5 s each at 200,000 pending jobs.)
# Rows past the first %(starting)s are claimed reserved (read ahead of a free worker).
_CLAIM = (
    """
WITH picked AS (
    SELECT c.seq, c.priority, c.run_at, c.concurrency_key, c.concurrency_limit
    FROM {jobs} AS c
    WHERE c.status = 'pending' AND {candidates}
      AND (c.pending_slot IS NULL OR NOT EXISTS (
          SELECT 1 FROM {jobs} AS a WHERE a.active_slot = c.pending_slot))
      AND NOT EXISTS (SELECT 1 FROM {paused} AS z WHERE z.type = %(type)s)
      AND """
    + KEY_HAS_ROOM
    + """
    ORDER BY c.priority, c.run_at, c.seq
    LIMIT %(limit)s
    FOR UPDATE OF c SKIP LOCKED
), ranked AS (
    SELECT seq, concurrency_key, concurrency_limit,
        row_number() OVER (ORDER BY priority, run_at, seq) AS n,
        row_number() OVER (PARTITION BY concurrency_key ORDER BY priority, run_at, seq) AS kn
    FROM picked
), slotted AS (
    SELECT r.seq, r.n, r.concurrency_key,
        CASE WHEN r.concurrency_key IS NULL THEN NULL ELSE """
    + FREE_SLOT
    + """ END AS slot
    FROM ranked AS r
)
UPDATE {jobs} AS j
SET status = 'active', claim_token = replace(gen_random_uuid()::text, '-', ''),
    attempts = j.attempts + 1, active_slot = j.pending_slot, pending_slot = NULL,
    claimed_at = {now}, heartbeat_at = {now}, updated_at = {now}, lease_owner = %(owner)s,
    reserved = slotted.n > %(starting)s, concurrency_slot = slotted.slot
FROM slotted WHERE j.seq = slotted.seq
    AND (slotted.concurrency_key IS NULL OR slotted.slot IS NOT NULL)
RETURNING {job_columns}, j.claim_token
"""
)
# The update of a taken slot's pending holder (rules.HolderUpdate, rules.debounced_run_at).
UPDATE_HOLDER = (
    "UPDATE {jobs} SET data = coalesce(%(data)s::text, data), run_at = CASE WHEN "
    "%(push_to)s::timestamptz IS NULL THEN run_at ELSE GREATEST(run_at, LEAST("
    "%(push_to)s::timestamptz, created_at + %(within_ms)s::bigint * interval '1 millisecond'))"
    " END, updated_at = {now} "
)
HELD_PENDING = " AND status = 'pending' AND type = %(type)s RETURNING id"
STATEMENTS: dict[str, str] = {
    "claim_due": _CLAIM.replace("{candidates}", DUE),
    "claim_by_key": _CLAIM.replace("{candidates}", DUE_BY_KEY),
    "claim_by_id": _CLAIM.replace("{candidates}", BY_ID),
    "mark_started": ("UPDATE {jobs} AS j SET reserved = false WHERE " + FENCE + " AND j.reserved"),
    # -- enqueue ------------------------------------------------------------------------
    # Keyed enqueues, inline creations and retries serialise on their key (a transaction
    # lock: nothing outlives the transaction), so the other-scope check cannot race.
    "lock_key": "SELECT pg_advisory_xact_lock({lock_class}, hashtext(%(key)s))",
    "scope_of_live": "SELECT dedupe_scope FROM {jobs} WHERE live_slot = %(key)s LIMIT 1",
    "scope_of_pending_or_active": (
        "SELECT dedupe_scope FROM {jobs} "
        "WHERE pending_slot = %(key)s OR active_slot = %(key)s LIMIT 1"
    ),
    # Any conflict is a dedupe slot (ids are random), and the insert then does nothing.
    # The NOTIFY is sent inside the enqueue's own transaction: it fires at commit.
    "insert_pending": """
        WITH ins AS (
            INSERT INTO {jobs} (id, type, data, status, priority, run_at, max_attempts,
                dedupe_key, dedupe_scope, live_slot, pending_slot, created_at, updated_at,
                backoff, backoff_delay, backoff_max_delay, concurrency_key, concurrency_limit,
                trace_context, timeout, parent_id, parent_step)
            VALUES (%(id)s, %(type)s, %(data)s, 'pending', %(priority)s,
                coalesce(%(run_at)s::timestamptz, {now}), %(max_attempts)s, %(dedupe_key)s,
                %(dedupe_scope)s, %(live_slot)s, %(pending_slot)s, {now}, {now},
                %(backoff)s, %(backoff_delay)s, %(backoff_max_delay)s,
                %(concurrency_key)s, %(concurrency_limit)s, %(trace_context)s, %(timeout)s,
                %(parent_id)s, %(parent_step)s)
            ON CONFLICT DO NOTHING
            RETURNING id, type, run_at)
        SELECT ins.id, """
    + notify("ins")
    + """ FROM ins
    """,
    "insert_active": """
        INSERT INTO {jobs} AS j (id, type, data, status, priority, run_at, attempts,
            max_attempts, dedupe_key, dedupe_scope, live_slot, created_at, updated_at,
            backoff, backoff_delay, backoff_max_delay, claim_token, heartbeat_at,
            claimed_at, lease_owner, trace_context, timeout, parent_id, parent_step)
        SELECT %(id)s::text, %(type)s::text, %(data)s::text, 'active', %(priority)s::integer,
            coalesce(%(run_at)s::timestamptz, {now}), 1, %(max_attempts)s::integer,
            %(dedupe_key)s::text, %(dedupe_scope)s::text, %(live_slot)s::text, {now}, {now},
            %(backoff)s::text, %(backoff_delay)s::double precision,
            %(backoff_max_delay)s::double precision, %(token)s::text, {now}, {now},
            %(owner)s::text, %(trace_context)s::text, %(timeout)s::double precision,
            %(parent_id)s::text, %(parent_step)s::text
        WHERE NOT EXISTS (SELECT 1 FROM {paused} WHERE type = %(type)s)
        ON CONFLICT DO NOTHING
        RETURNING {job_columns}
    """,
    "job_exists": "SELECT 1 FROM {jobs} WHERE id = %(id)s",
    # LEAST skips NULLs: the CASE keeps run_at without a push, a NULL within_ms is no bound.
    "update_holder_live": UPDATE_HOLDER + "WHERE live_slot = %(key)s" + HELD_PENDING,
    "update_holder_pending": UPDATE_HOLDER + "WHERE pending_slot = %(key)s" + HELD_PENDING,
    # -- fenced writes ------------------------------------------------------------------
    "heartbeat": (
        "UPDATE {jobs} AS j SET heartbeat_at = {now} WHERE "
        + FENCE
        + " RETURNING j.id, j.cancel_requested"
    ),
    # -- cancelling: a pending job at once; an active one is asked through its heartbeat
    # (The ``_matching`` forms: the same on every job a listing filter selects, {where}.)
    "cancel_pending": CANCEL_PENDING + "j.id = %(id)s RETURNING j.id",
    "request_cancel": REQUEST_CANCEL + "j.id = %(id)s RETURNING j.id",
    "cancel_pending_matching": CANCEL_PENDING + "({where})",
    "request_cancel_matching": REQUEST_CANCEL + "({where})",
    # -- run now: a delayed pending job becomes due (and the listeners hear of it) ------
    "run_now": RUN_NOW.replace("{where}", "j.id = %(id)s"),
    "run_now_matching": RUN_NOW,
    "pending_exists": "SELECT 1 FROM {jobs} WHERE id = %(id)s AND status = 'pending'",
    # Each completion keeps its own result: the batch is joined row by row.
    "complete": ends_runs(
        "ended",
        "UPDATE {jobs} AS j SET " + TERMINAL + ", done_token = j.claim_token, result = u.result "
        "FROM unnest(%(ids)s::text[], %(tokens)s::text[], %(results)s::text[]) "
        "AS u(id, token, result) "
        "WHERE j.id = u.id AND j.claim_token = u.token AND j.status = 'active' "
        "RETURNING j.id, j.done_token, j.concurrency_key",
    )
    + "SELECT ended.id, ended.done_token FROM ended WHERE "
    + NOTIFY_WAITING,
    "terminal": ends_runs(
        "ended",
        "UPDATE {jobs} AS j SET " + TERMINAL + ", "
        "fail_reason = coalesce(%(reason)s, j.fail_reason), "
        "failure_kind = %(kind)s WHERE " + FENCE + " RETURNING j.id, j.concurrency_key",
    )
    + "SELECT ended.id FROM ended WHERE "
    + NOTIFY_WAITING,
    "lock_claim": (
        "SELECT j.id, j.claim_token, j.attempts, j.max_attempts, j.reserved, "
        "j.unstarted_reaps, j.cancel_requested, "
        + FOLLOWED
        + " FROM {jobs} AS j WHERE "
        + FENCE
        + " FOR UPDATE OF j"
    ),
    # Back to pending: a pending-scope job moves its active slot back to the pending slot
    # (the caller checked, under the row lock, that no follower holds it); the live slot
    # stays.
    "to_pending": ends_runs(
        "moved",
        """UPDATE {jobs} AS j SET status = 'pending', updated_at = {now},
            pending_slot = j.active_slot, active_slot = NULL, """
        + ADD_ATTEMPT
        + """, claim_token = NULL,
            heartbeat_at = NULL, claimed_at = NULL, lease_owner = NULL, reserved = false,
            attempts = j.attempts - %(refund)s,
            unstarted_reaps = j.unstarted_reaps + %(unstarted)s,
            run_at = CASE WHEN %(due_now)s THEN {now}
                          ELSE coalesce(%(run_at)s::timestamptz, j.run_at) END,
            fail_reason = coalesce(%(reason)s, j.fail_reason)
        WHERE """
        + FENCE
        + " RETURNING j.id, j.type, j.run_at, j.concurrency_key",
    )
    + "SELECT moved.id, "
    + notify("moved")
    + " FROM moved WHERE "
    + NOTIFY_WAITING,
    "append_journal": """
        UPDATE {jobs} AS j
        SET journal = CASE WHEN j.journal IS NULL THEN %(journal)s
                           ELSE left(j.journal, -1) || ',' || substr(%(journal)s, 2) END,
            journal_len = j.journal_len + %(count)s
        WHERE """
    + FENCE
    + " AND j.journal_len = %(position)s RETURNING j.id",
    "journal_len": "SELECT j.journal_len FROM {jobs} AS j WHERE " + FENCE,
    "resolve_miss": """
        SELECT j.status, j.done_token,
            (SELECT r.result FROM {receipts} AS r
             WHERE r.job_id = j.id AND r.token = %(token)s AND r.op = %(op)s) AS receipt
        FROM {jobs} AS j WHERE j.id = %(id)s
    """,
    "add_receipt": """
        INSERT INTO {receipts} AS r (job_id, token, op, result, n)
        VALUES (%(id)s, %(token)s, %(op)s, %(result)s,
            (SELECT coalesce(max(n), 0) + 1 FROM {receipts} WHERE job_id = %(id)s))
        ON CONFLICT (job_id, token, op) DO UPDATE SET result = excluded.result, n = excluded.n
        RETURNING r.n
    """,
    "trim_receipts": "DELETE FROM {receipts} WHERE job_id = %(id)s AND n <= %(n)s",
    "add_logs": """
        INSERT INTO {logs} (job_id, at, message)
        SELECT u.job_id, u.at, u.message
        FROM unnest(%(job_ids)s::text[], %(ats)s::timestamptz[], %(messages)s::text[])
            WITH ORDINALITY AS u(job_id, at, message, n)
        ORDER BY u.n
    """,
    "trim_logs": """
        DELETE FROM {logs} AS l USING (
            SELECT job_id, seq, row_number() OVER (PARTITION BY job_id ORDER BY seq DESC) AS k
            FROM {logs} WHERE job_id = ANY(%(job_ids)s::text[])) AS old
        WHERE l.job_id = old.job_id AND l.seq = old.seq AND old.k > %(keep)s
    """,
    # -- recovery -----------------------------------------------------------------------
    # Oldest leases first; SKIP LOCKED so two reapers (or a reaper and a worker's write)
    # never wait on each other.
    "expired": (
        "SELECT j.id, j.claim_token, j.attempts, j.max_attempts, j.reserved, "
        "j.unstarted_reaps, j.cancel_requested, " + FOLLOWED + " FROM {jobs} AS j "
        "WHERE j.status = 'active' AND j.heartbeat_at < {now} - %(timeout)s * interval "
        "'1 second' ORDER BY j.heartbeat_at, j.seq LIMIT %(limit)s FOR UPDATE OF j SKIP LOCKED"
    ),
    # -- operations ---------------------------------------------------------------------
    "failed_for_retry": (
        "SELECT dedupe_key, dedupe_scope FROM {jobs} WHERE id = %(id)s AND status = 'failed'"
    ),
    "retry": """
        WITH back AS (UPDATE {jobs} SET status = 'pending', attempts = 0, run_at = {now},
            updated_at = {now}, failure_kind = NULL, finished_at = NULL,
            live_slot = CASE WHEN %(slot)s::text = 'live' THEN %(key)s ELSE live_slot END,
            pending_slot = CASE WHEN %(slot)s::text = 'pending' THEN %(key)s ELSE pending_slot END
        WHERE id = %(id)s AND status = 'failed' RETURNING id, type, run_at)
        SELECT back.id, """
    + notify("back")
    + """ FROM back
    """,
    "slot_held": (
        "SELECT 1 FROM {jobs} WHERE (%(slot)s::text = 'live' AND live_slot = %(key)s) "
        "OR (%(slot)s::text = 'pending' AND pending_slot = %(key)s) LIMIT 1"
    ),
    "delete": "DELETE FROM {jobs} WHERE id = %(id)s AND status <> 'active' RETURNING id",
    # Retention: finished jobs past an age on the server's clock (logs and receipts cascade).
    "delete_matching": "DELETE FROM {jobs} AS j WHERE ({where}) AND j.status <> 'active'",
    "prune": (
        "DELETE FROM {jobs} WHERE status = ANY(%(statuses)s::text[]) "
        "AND finished_at < {now} - %(age)s * interval '1 second'"
    ),
    **q.SUBSCRIPTIONS,
}


class _Keep(dict[str, str]):
    """Leaves a placeholder it has no value for in place (filled per call)."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def ident(*parts: str) -> str:
    """A quoted (optionally schema-qualified) SQL identifier."""
    return sql.Identifier(*parts).as_string(None)


def literal(text: str) -> str:
    """A quoted SQL string literal."""
    return sql.Literal(text).as_string(None)


@dataclass(frozen=True)
class Queries(Statements):
    """The statements for one set of tables, rendered once: those the shared flows name
    (:class:`~durabl.stores.sql.statements.Statements`), then PostgreSQL's own, each as
    in :data:`STATEMENTS`."""

    mark_started: str
    insert_many: str
    existing_ids: str
    complete: str
    add_logs: str
    trim_logs: str
    prune: str
    list_jobs: str
    stats_by_type_counts: str
    stats_by_type_oldest: str
    activity_counts: str
    activity_candidates: str
    next_due: str
    server_now: str
    #: The search clause (see SEARCH) by whether a string is above all that start with the
    #: search (bounded), and whether the list is of one status.
    searches: dict[tuple[bool, bool], str]
    list_walk: str
    walk_source: str
    #: The jobs table as a listing's source (see ``listing``).
    jobs_source: str

    @classmethod
    def for_tables(cls, names: dict[str, str]) -> Queries:
        """The statements over the tables ``names`` names (``jobs``, ``logs`` ...)."""
        values = _Keep(names)
        values["job_columns"] = JOB_COLUMNS.format_map(values)
        values["now"] = NOW
        templates = {**STATEMENTS, **READS, **BULK_STATEMENTS, **REGISTRY_STATEMENTS}
        rendered = {name: _render(template, values) for name, template in templates.items()}
        bounded = {
            "upper_id": " AND s.id ~<~ %(search_hi)s",
            "upper_key": " AND s.dedupe_key ~<~ %(search_hi)s",
        }
        unbounded = {"upper_id": "", "upper_key": ""}
        of_status = {"reason_status": " AND s.status = %(status)s"}
        any_status = {"reason_status": ""}
        searches = {
            (True, False): _render(SEARCH, {**values, **bounded, **any_status}),
            (False, False): _render(SEARCH, {**values, **unbounded, **any_status}),
            (True, True): _render(SEARCH, {**values, **bounded, **of_status}),
            (False, True): _render(SEARCH, {**values, **unbounded, **of_status}),
        }
        return cls(
            **rendered,
            searches=searches,
            list_walk=_render(LIST_WALK, values),
            walk_source=_render(WALK_SOURCE, values),
            jobs_source=_render("{jobs} AS j", values),
        )

    def listing(
        self, statement: str, where: str, order: str = ORDER_NEWEST, source: str | None = None
    ) -> str:
        """``list_jobs`` or ``count_jobs`` with its WHERE clause (built from FILTERS), and
        for ``list_jobs`` the rows it reads (None: the jobs table, aliased ``j``)."""
        source = self.jobs_source if source is None else source
        return (
            statement.replace("{source}", source)
            .replace("{where}", where)
            .replace("{order}", order)
        )


def _render(template: str, values: dict[str, Any]) -> str:
    # Twice: fragments (the job columns, TERMINAL) themselves name tables and {now}.
    return template.format_map(values).format_map(values)
