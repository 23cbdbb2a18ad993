"""The PostgreSQL schema, versioned: numbered migrations applied in order, one transaction
each, under a transaction-level advisory lock.

``<table>_meta`` holds ``schema_version``, the number of the last migration applied. A
release that needs a schema change appends a migration to :data:`MIGRATIONS`; tables
written by an older release are upgraded in place by the next ``startup()`` (or ``durabl
migrate``). Tables whose version is newer than this code knows are refused, not guessed at.

Every table and index name derives from the jobs table's name (``table=``), so several
queues (or tests) can share a database. The lock is ``pg_advisory_xact_lock``: it is
released with the transaction, so it is safe behind PgBouncer in transaction mode, and many
processes starting at once simply take turns; whoever comes second finds the migration
applied and skips it.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model import migrations
from durabl.model.migrations import VERSION_KEY
from durabl.stores.postgres.sql import ident, literal

MAX_CHANNEL_BYTES = 63  # NAMEDATALEN - 1: pg_notify refuses longer channel names
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")


def _lock_class(text: str) -> int:
    """A stable signed 32-bit number for ``text`` (the first key of a two-key lock)."""
    value = zlib.crc32(text.encode("utf-8"))
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclass(frozen=True)
class Tables:
    """The names of one queue's tables and indexes, from ``table`` (``name`` or
    ``schema.name``; letters, digits and underscores, at most 40 characters each)."""

    table: str

    def __post_init__(self) -> None:
        parts = self.table.split(".") if isinstance(self.table, str) else []
        if not 1 <= len(parts) <= 2 or not all(_NAME.match(p) for p in parts):
            raise ValueError(
                f"table must be a name such as 'durabl_jobs' or 'myschema.durabl_jobs' "
                f"(letters, digits, underscores; at most 40 characters each), got {self.table!r}"
            )

    @property
    def schema(self) -> str | None:
        return self.table.split(".")[0] if "." in self.table else None

    @property
    def base(self) -> str:
        return self.table.split(".")[-1]

    def qualified(self, suffix: str = "") -> str:
        """A table's quoted name: the jobs table's name plus ``suffix``."""
        name = self.base + suffix
        return ident(self.schema, name) if self.schema else ident(name)

    def index(self, suffix: str) -> str:
        """An index's quoted name (it lives in its table's schema)."""
        return ident(f"{self.base}_{suffix}")

    def names(self) -> dict[str, str]:
        return {
            "jobs": self.qualified(),
            "logs": self.qualified("_logs"),
            "receipts": self.qualified("_receipts"),
            "meta": self.qualified("_meta"),
            "schedules": self.qualified("_schedules"),
            "workers": self.qualified("_workers"),
            "subscriptions": self.qualified("_subscriptions"),
            "signals": self.qualified("_signals"),
            "rate_limits": self.qualified("_rate_limits"),
            "paused": self.qualified("_paused_types"),
            "channel": literal(self.channel),
            "lock_class": str(self.key_lock_class),
        }

    @property
    def channel(self) -> str:
        """The NOTIFY channel on which writes announce jobs that became pending: the table's
        name, or (past the server's 63-byte limit on channel names) its start and a hash."""
        if len(self.table) <= MAX_CHANNEL_BYTES:
            return self.table
        return f"{self.table[: MAX_CHANNEL_BYTES - 9]}_{zlib.crc32(self.table.encode()):08x}"

    @property
    def key_lock_class(self) -> int:
        """The first key of the per-dedupe-key transaction locks."""
        return _lock_class(self.table)

    @property
    def schema_lock_class(self) -> int:
        return _lock_class(self.table + ":schema")


def _create_v1(t: Tables) -> list[str]:
    """Jobs, their logs and their write receipts, and every index the queries need."""
    jobs, logs, receipts = t.qualified(), t.qualified("_logs"), t.qualified("_receipts")
    return [
        f"""
        CREATE TABLE IF NOT EXISTS {jobs} (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id text NOT NULL UNIQUE,
            type text NOT NULL,
            data text NOT NULL,
            status text NOT NULL CHECK (
                status IN ('pending', 'active', 'completed', 'failed', 'superseded')),
            priority integer NOT NULL,
            run_at timestamptz NOT NULL,
            attempts integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL,
            dedupe_key text,
            dedupe_scope text,
            live_slot text,
            pending_slot text,
            active_slot text,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            finished_at timestamptz,
            fail_reason text,
            failure_kind text,
            backoff text NOT NULL,
            backoff_delay double precision NOT NULL,
            backoff_max_delay double precision NOT NULL,
            claim_token text,
            heartbeat_at timestamptz,
            claimed_at timestamptz,
            lease_owner text,
            reserved boolean NOT NULL DEFAULT false,
            unstarted_reaps integer NOT NULL DEFAULT 0,
            done_token text,
            journal text,
            journal_len integer NOT NULL DEFAULT 0
        )
        """,
        f"""
        CREATE TABLE IF NOT EXISTS {logs} (
            job_id text NOT NULL REFERENCES {jobs}(id) ON DELETE CASCADE,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            at timestamptz NOT NULL,
            message text NOT NULL,
            PRIMARY KEY (job_id, seq)
        )
        """,
        f"""
        CREATE TABLE IF NOT EXISTS {receipts} (
            job_id text NOT NULL REFERENCES {jobs}(id) ON DELETE CASCADE,
            token text NOT NULL,
            op text NOT NULL,
            result text NOT NULL,
            n integer NOT NULL,
            PRIMARY KEY (job_id, token, op)
        )
        """,
        # Dedupe: one slot column per kind of exclusion, set only while the job holds it.
        f"CREATE UNIQUE INDEX IF NOT EXISTS {t.index('dedupe_live')} ON {jobs}(live_slot) "
        "WHERE live_slot IS NOT NULL",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {t.index('dedupe_pending')} ON {jobs}(pending_slot) "
        "WHERE pending_slot IS NOT NULL",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {t.index('dedupe_active')} ON {jobs}(active_slot) "
        "WHERE active_slot IS NOT NULL",
        # The claim: equality on type, then claim order, over pending jobs only.
        f"CREATE INDEX IF NOT EXISTS {t.index('claim')} ON {jobs}(type, priority, run_at, seq) "
        "WHERE status = 'pending'",
        # The reaper: active jobs by last renewal.
        f"CREATE INDEX IF NOT EXISTS {t.index('lease')} ON {jobs}(heartbeat_at, seq) "
        "WHERE status = 'active'",
        f"CREATE INDEX IF NOT EXISTS {t.index('type_status')} ON {jobs}(type, status, run_at)",
        f"CREATE INDEX IF NOT EXISTS {t.index('status_finished')} "
        f"ON {jobs}(status, finished_at, seq)",
        f"CREATE INDEX IF NOT EXISTS {t.index('dedupe_key')} "
        f"ON {jobs}(dedupe_key text_pattern_ops)",
    ]


Migration = tuple[int, Callable[[Tables], Sequence[str]]]


def _add_schedules(t: Tables) -> list[str]:
    """Schedules (:mod:`durabl.stores.sql.store`): a name, the definition as
    opaque text, and the state a firing moves by compare-and-set."""
    return [
        f"""
        CREATE TABLE IF NOT EXISTS {t.qualified("_schedules")} (
            name text PRIMARY KEY,
            definition text NOT NULL,
            next_run_at timestamptz,
            last_run_at timestamptz,
            last_job_id text
        )
        """
    ]


def _add_job_record(t: Tables) -> list[str]:
    """The job record: how each claim ended (a JSON array, NULL until the first outcome,
    so jobs written before read back with an empty history), the value a handler returned,
    the terminal status ``cancelled`` and the reason of a cancellation requested while the
    job runs."""
    jobs = t.qualified()
    check = ident(f"{t.base}_status_check")
    return [
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS attempt_history jsonb",
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS result text",
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS cancel_requested text",
        f"ALTER TABLE {jobs} DROP CONSTRAINT IF EXISTS {check}",
        f"ALTER TABLE {jobs} ADD CONSTRAINT {check} CHECK (status IN "
        "('pending', 'active', 'completed', 'failed', 'superseded', 'cancelled'))",
    ]


def _add_flow_control(t: Tables) -> list[str]:
    """Flow control (:mod:`durabl.model.flow`): a job's concurrency key, its limit and the
    slot an active job holds, the unique index on (key, slot) over active jobs that makes a
    key's slots exclusive across claimers, and each rate-limited type's limit with the
    claims counted in its current window."""
    jobs = t.qualified()
    return [
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS concurrency_key text",
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS concurrency_limit integer",
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS concurrency_slot integer",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {t.index('concurrency_slot')} "
        f"ON {jobs}(concurrency_key, concurrency_slot) "
        "WHERE status = 'active' AND concurrency_key IS NOT NULL",
        f"CREATE INDEX IF NOT EXISTS {t.index('concurrency')} "
        f"ON {jobs}(concurrency_key, status, type, priority, run_at, seq) "
        "WHERE concurrency_key IS NOT NULL",
        f"""
        CREATE TABLE IF NOT EXISTS {t.qualified("_rate_limits")} (
            type text PRIMARY KEY,
            max_starts integer NOT NULL,
            per_ms bigint NOT NULL,
            window_start bigint NOT NULL DEFAULT 0,
            started integer NOT NULL DEFAULT 0
        )
        """,
    ]


def _add_workers(t: Tables) -> list[str]:
    """The live workers registry (:mod:`durabl.stores.sql.store`): one row per worker
    process, refreshed every heartbeat interval."""
    return [
        f"""
        CREATE TABLE IF NOT EXISTS {t.qualified("_workers")} (
            id text PRIMARY KEY,
            host text NOT NULL,
            pid integer NOT NULL,
            concurrency jsonb NOT NULL,
            started_at timestamptz NOT NULL,
            last_seen timestamptz NOT NULL,
            active integer NOT NULL,
            heartbeat_interval double precision NOT NULL
        )
        """
    ]


def _add_trace_context(t: Tables) -> list[str]:
    """The propagation headers stored at enqueue (:mod:`durabl.tracing`): a JSON object
    as text, NULL for a job enqueued without one (every job written before)."""
    return [f"ALTER TABLE {t.qualified()} ADD COLUMN IF NOT EXISTS trace_context text"]


def _add_timeout(t: Tables) -> list[str]:
    """A job's own time limit in seconds (``enqueue(timeout=)``), NULL for none (every job
    written before)."""
    return [f"ALTER TABLE {t.qualified()} ADD COLUMN IF NOT EXISTS timeout double precision"]


def _add_failed_kind(t: Tables) -> list[str]:
    """Failed jobs counted by type and failure kind from an index alone (the admin's
    overview, ``get_stats``). Partial: only a job entering or leaving ``failed`` writes it."""
    return [
        f"CREATE INDEX IF NOT EXISTS {t.index('failed_kind')} "
        f"ON {t.qualified()}(type, failure_kind) WHERE status = 'failed'"
    ]


def _add_search_indexes(t: Tables) -> list[str]:
    """What a search probes instead of reading every job of a list: the ids in byte order
    (``text_pattern_ops``, whatever the database's collation; an id never changes, so only
    an enqueue writes it) and the jobs that have a failure reason. The dedupe keys have
    had theirs since version 1."""
    jobs = t.qualified()
    return [
        f"CREATE INDEX IF NOT EXISTS {t.index('id_pattern')} ON {jobs}(id text_pattern_ops)",
        f"CREATE INDEX IF NOT EXISTS {t.index('has_reason')} ON {jobs}(seq) "
        "WHERE fail_reason IS NOT NULL",
    ]


def _reasons_by_status(t: Tables) -> list[str]:
    """The jobs that have a failure reason indexed by status: a list of one status (the
    completed jobs, the pending ones) searches only its own jobs' reasons."""
    jobs = t.qualified()
    return [
        f"CREATE INDEX IF NOT EXISTS {t.index('reason_by_status')} ON {jobs}(status, seq) "
        "WHERE fail_reason IS NOT NULL",
        f"DROP INDEX IF EXISTS {t.qualified('_has_reason')}",  # the index's own name
    ]


def _pending_by_run_at(t: Tables) -> list[str]:
    """The pending jobs by due time (ties newest first), so the pending list sorts by it at
    any length; only pending rows are in it (an enqueue and a claim each write it once)."""
    return [
        f"CREATE INDEX IF NOT EXISTS {t.index('pending_run_at')} "
        f"ON {t.qualified()}(run_at, seq DESC) WHERE status = 'pending'",
    ]


def _add_subscriptions(t: Tables) -> list[str]:
    """Event subscriptions (:mod:`durabl.stores.sql.subscriptions`): one row per event and
    job type its sending starts."""
    return [
        f"""
        CREATE TABLE IF NOT EXISTS {t.qualified("_subscriptions")} (
            event text NOT NULL,
            type text NOT NULL,
            PRIMARY KEY (event, type)
        )
        """
    ]


def _add_signals(t: Tables) -> list[str]:
    """Signals (:mod:`durabl.stores.sql.signals`): kept with their job (deleted with it),
    numbered by ``seq`` in the order stored; read by job, name and ``seq``."""
    signals = t.qualified("_signals")
    return [
        f"""
        CREATE TABLE IF NOT EXISTS {signals} (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            job_id text NOT NULL REFERENCES {t.qualified()}(id) ON DELETE CASCADE,
            name text NOT NULL,
            data text NOT NULL,
            sent_at timestamptz NOT NULL
        )
        """,
        f"CREATE INDEX IF NOT EXISTS {t.index('signals_job')} ON {signals}(job_id, name, seq)",
    ]


def _add_pauses(t: Tables) -> list[str]:
    """Pausing (:mod:`durabl.model.pauses`): the paused types, which every claim leaves
    out, and a schedule's pause (false for every schedule stored before)."""
    return [
        f"""
        CREATE TABLE IF NOT EXISTS {t.qualified("_paused_types")} (
            type text PRIMARY KEY,
            paused_at timestamptz NOT NULL
        )
        """,
        f"ALTER TABLE {t.qualified('_schedules')} "
        "ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false",
    ]


def _add_parents(t: Tables) -> list[str]:
    """Child jobs (``octx.start_children``): a child's parent and its place among the
    children of the step that started it; its parent's children listed and counted by
    status (a gather, the wake of a waiting parent, a cancel's cascade)."""
    jobs = t.qualified()
    return [
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS parent_id text",
        f"ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS parent_step text",
        f"CREATE INDEX IF NOT EXISTS {t.index('parent')} ON {jobs}(parent_id, status, seq) "
        "WHERE parent_id IS NOT NULL",
    ]


MIGRATIONS: list[Migration] = [
    (1, _create_v1),
    (2, _add_schedules),
    (3, _add_job_record),
    (4, _add_flow_control),
    (5, _add_workers),
    (6, _add_trace_context),
    (7, _add_failed_kind),
    (8, _add_search_indexes),
    (9, _reasons_by_status),
    (10, _pending_by_run_at),
    (11, _add_timeout),
    (12, _add_subscriptions),
    (13, _add_signals),
    (14, _add_pauses),
    (15, _add_parents),
]
"""Every schema change, in order. Append; never edit or reorder a released migration."""


#: The way out besides upgrading that a refusal names.
ELSEWHERE = "point this process at another table= name"


def _schema() -> migrations.VersionedSchema[Migration]:
    # Built per use from MIGRATIONS as it is now (tests append a migration of their own).
    return migrations.VersionedSchema(MIGRATIONS, elsewhere=ELSEWHERE)


def latest_version() -> int:
    return _schema().latest


def _holder(t: Tables) -> str:
    return f"PostgreSQL table set {t.table!r}"


def read_version(cur: Cursor[DictRow], t: Tables) -> int:
    """The tables' schema version; 0 where durabl has never set up."""
    cur.execute("SELECT to_regclass(%(meta)s) IS NOT NULL AS present", {"meta": t.names()["meta"]})
    row = cur.fetchone()
    if row is None or not row["present"]:
        return 0
    cur.execute(
        f"SELECT value FROM {t.qualified('_meta')} WHERE key = %(key)s", {"key": VERSION_KEY}
    )
    found = cur.fetchone()
    if found is None:
        return 0
    return migrations.stored_version(
        found["value"],
        holder=f"PostgreSQL table {t.qualified('_meta')}",
        fix=f"restore the tables, or {ELSEWHERE}",
    )


def pending_migrations(version: int, t: Tables) -> list[Migration]:
    """The migrations the tables of ``t``, found at ``version``, still need (refused when a
    newer release wrote them)."""
    return _schema().pending(version, _holder(t))


def apply_migrations(cur: Cursor[DictRow], pending: list[Migration], t: Tables) -> list[int]:
    """Apply ``pending`` in order inside the caller's one transaction, under the schema
    lock, skipping those another process applied first; the version is written once, at
    the end. One transaction: a fresh table set is made in one round of statements, and an
    upgrade that fails part way leaves the tables at the version they had. Returns the
    numbers of the migrations it ran."""
    cur.execute("SELECT pg_advisory_xact_lock(%(k)s, 0)", {"k": t.schema_lock_class})
    meta = t.qualified("_meta")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value text NOT NULL)")
    version = read_version(cur, t)
    ran: list[int] = []
    for number, migrate in pending:
        if not _schema().needs(number, version, _holder(t)):
            continue
        for statement in migrate(t):
            cur.execute(statement)
        version = number
        ran.append(number)
    if ran:
        cur.execute(
            f"INSERT INTO {meta} (key, value) VALUES (%(key)s, %(value)s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            {"key": VERSION_KEY, "value": str(version)},
        )
    return ran
