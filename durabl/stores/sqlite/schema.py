"""The SQLite schema, versioned: numbered migrations applied in order, one transaction each.

``durabl_meta`` holds ``schema_version``, the number of the last migration applied. A
release that needs a schema change appends a migration to :data:`MIGRATIONS`; files written
by an older release are upgraded in place by the next ``startup()``. A file whose version is
newer than this code knows is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from durabl.model import migrations
from durabl.model.migrations import VERSION_KEY

META_TABLE = "durabl_meta"
JOBS_TABLE = "durabl_jobs"
LOGS_TABLE = "durabl_logs"
RECEIPTS_TABLE = "durabl_receipts"
SCHEDULES_TABLE = "durabl_schedules"
RATE_LIMITS_TABLE = "durabl_rate_limits"
WORKERS_TABLE = "durabl_workers"
SUBSCRIPTIONS_TABLE = "durabl_subscriptions"
SIGNALS_TABLE = "durabl_signals"
PAUSED_TYPES_TABLE = "durabl_paused_types"


def _create_v1(conn: sqlite3.Connection) -> None:
    """Jobs, their logs and their write receipts, and every index the queries need."""
    statements = (
        f"""
        CREATE TABLE IF NOT EXISTS {JOBS_TABLE} (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            type TEXT NOT NULL,
            data TEXT NOT NULL,
            status TEXT NOT NULL CHECK (
                status IN ('pending', 'active', 'completed', 'failed', 'superseded')
            ),
            priority INTEGER NOT NULL,
            run_at INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL,
            dedupe_key TEXT,
            dedupe_scope TEXT,
            live_slot TEXT,
            pending_slot TEXT,
            active_slot TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            finished_at INTEGER,
            fail_reason TEXT,
            failure_kind TEXT,
            backoff TEXT NOT NULL,
            backoff_delay REAL NOT NULL,
            backoff_max_delay REAL NOT NULL,
            claim_token TEXT,
            heartbeat_at INTEGER,
            claimed_at INTEGER,
            lease_owner TEXT,
            journal TEXT
        )
        """,
        f"""
        CREATE TABLE IF NOT EXISTS {LOGS_TABLE} (
            job_id TEXT NOT NULL REFERENCES {JOBS_TABLE}(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            at INTEGER NOT NULL,
            message TEXT NOT NULL,
            PRIMARY KEY (job_id, seq)
        ) WITHOUT ROWID
        """,
        f"""
        CREATE TABLE IF NOT EXISTS {RECEIPTS_TABLE} (
            job_id TEXT NOT NULL REFERENCES {JOBS_TABLE}(id) ON DELETE CASCADE,
            token TEXT NOT NULL,
            op TEXT NOT NULL,
            result TEXT NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (job_id, token, op)
        ) WITHOUT ROWID
        """,
        # Dedupe: one slot column per kind of exclusion, set only while the job holds it.
        f"CREATE UNIQUE INDEX IF NOT EXISTS durabl_dedupe_live ON {JOBS_TABLE}(live_slot) "
        "WHERE live_slot IS NOT NULL",
        f"CREATE UNIQUE INDEX IF NOT EXISTS durabl_dedupe_pending ON {JOBS_TABLE}(pending_slot) "
        "WHERE pending_slot IS NOT NULL",
        f"CREATE UNIQUE INDEX IF NOT EXISTS durabl_dedupe_active ON {JOBS_TABLE}(active_slot) "
        "WHERE active_slot IS NOT NULL",
        # The claim: equality on type, then claim order, over pending jobs only.
        f"CREATE INDEX IF NOT EXISTS durabl_claim ON {JOBS_TABLE}(type, priority, run_at, seq) "
        "WHERE status = 'pending'",
        # The reaper: active jobs by last renewal.
        f"CREATE INDEX IF NOT EXISTS durabl_lease ON {JOBS_TABLE}(heartbeat_at) "
        "WHERE status = 'active'",
        # Stats per type and status; the oldest due pending job per type.
        f"CREATE INDEX IF NOT EXISTS durabl_type_status ON {JOBS_TABLE}(type, status, run_at)",
        # Failed jobs newest failure first; counts by status across types.
        f"CREATE INDEX IF NOT EXISTS durabl_status_finished ON {JOBS_TABLE}(status, finished_at)",
    )
    for statement in statements:
        conn.execute(statement)


def _add_done_token(conn: sqlite3.Connection) -> None:
    """The claim token whose completion ended the job. A repeated completion is answered
    from the row itself, so a completion writes no receipt row (the busiest write of all
    is one B-tree write the cheaper)."""
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN done_token TEXT")


def _add_reservations(conn: sqlite3.Connection) -> None:
    """Claims read ahead of a free worker: ``reserved`` until the start of their handler is
    recorded, and how often a job was reaped unstarted (see :mod:`durabl.model.rules`)."""
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN reserved INTEGER NOT NULL DEFAULT 0")
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN unstarted_reaps INTEGER NOT NULL DEFAULT 0")


def _add_schedules(conn: sqlite3.Connection) -> None:
    """Schedules (:mod:`durabl.stores.sql.store`): a name, the definition as opaque
    text, and the state a firing moves by compare-and-set."""
    conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {SCHEDULES_TABLE} (
            name TEXT PRIMARY KEY,
            definition TEXT NOT NULL,
            next_run_at INTEGER,
            last_run_at INTEGER,
            last_job_id TEXT
        ) WITHOUT ROWID
        """
    )


def _add_job_record(conn: sqlite3.Connection) -> None:
    """The job record: how each claim ended (a JSON array, NULL until the first outcome:
    jobs written before this migration read back with an empty history) and the value a
    handler returned."""
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN attempt_history TEXT")
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN result TEXT")
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN cancel_requested TEXT")
    _allow_cancelled(conn)


def _allow_cancelled(conn: sqlite3.Connection) -> None:
    """Let the status CHECK accept ``cancelled``. SQLite cannot alter a CHECK constraint;
    loosening one changes nothing stored, so the table's SQL is edited in place (the way
    SQLite's ALTER TABLE documentation gives for such changes) rather than copying every
    row into a new table. The schema cookie moves so every connection re-reads it."""
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    try:
        conn.execute(
            "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE type = 'table' AND name = ?",
            ("'superseded')", "'superseded', 'cancelled')", JOBS_TABLE),
        )
        conn.execute(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        conn.execute("PRAGMA writable_schema = OFF")


def _add_flow_control(conn: sqlite3.Connection) -> None:
    """Flow control (:mod:`durabl.model.flow`): a job's concurrency key and limit, an index
    to count a key's active and waiting jobs, and each rate-limited type's limit with the
    claims counted in its current window."""
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN concurrency_key TEXT")
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN concurrency_limit INTEGER")
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_concurrency ON {JOBS_TABLE}"
        "(concurrency_key, status, type, priority, run_at, seq) WHERE concurrency_key IS NOT NULL"
    )
    conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {RATE_LIMITS_TABLE} (
            type TEXT PRIMARY KEY,
            max_starts INTEGER NOT NULL,
            per_ms INTEGER NOT NULL,
            window_start INTEGER NOT NULL DEFAULT 0,
            started INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID
        """
    )


def _add_workers(conn: sqlite3.Connection) -> None:
    """The live workers registry (:mod:`durabl.stores.sql.store`): one row per worker
    process, refreshed every heartbeat interval; ``concurrency`` is a JSON object."""
    conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {WORKERS_TABLE} (
            id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            concurrency TEXT NOT NULL,
            started_at INTEGER NOT NULL,
            last_seen INTEGER NOT NULL,
            active INTEGER NOT NULL,
            heartbeat_interval REAL NOT NULL
        ) WITHOUT ROWID
        """
    )


def _add_trace_context(conn: sqlite3.Connection) -> None:
    """The propagation headers stored at enqueue (:mod:`durabl.tracing`): a JSON object,
    NULL for a job enqueued without one (every job written before this migration)."""
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN trace_context TEXT")


def _add_timeout(conn: sqlite3.Connection) -> None:
    """A job's own time limit in seconds (``enqueue(timeout=)``), NULL for none (every job
    written before this migration)."""
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN timeout REAL")


def _add_failed_kind(conn: sqlite3.Connection) -> None:
    """Failed jobs counted by type and failure kind from an index alone (the admin's
    overview, ``get_stats``). Partial: only a job entering or leaving ``failed`` writes it."""
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_failed_kind ON {JOBS_TABLE}(type, failure_kind) "
        "WHERE status = 'failed'"
    )


def _add_search_indexes(conn: sqlite3.Connection) -> None:
    """What a search probes instead of reading every job of a list: the dedupe keys (a
    key never changes, so only an enqueue writes it) and the jobs that have a failure
    reason (only a failure, or a retry that clears it, writes it). The id's unique index
    serves the id prefix."""
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_dedupe_key ON {JOBS_TABLE}(dedupe_key) "
        "WHERE dedupe_key IS NOT NULL"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_has_reason ON {JOBS_TABLE}(seq) "
        "WHERE fail_reason IS NOT NULL"
    )


def _reasons_by_status(conn: sqlite3.Connection) -> None:
    """The jobs that have a failure reason indexed by status: a list of one status (the
    completed jobs, the pending ones) searches only its own jobs' reasons."""
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_reason_by_status ON {JOBS_TABLE}(status, seq) "
        "WHERE fail_reason IS NOT NULL"
    )
    conn.execute("DROP INDEX IF EXISTS durabl_has_reason")


def _pending_by_run_at(conn: sqlite3.Connection) -> None:
    """The pending jobs by due time, so the pending list sorts by it at any length (only
    pending rows are in it: an enqueue and a claim each write it once)."""
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_pending_run_at ON {JOBS_TABLE}(run_at) "
        "WHERE status = 'pending'"
    )


def _add_subscriptions(conn: sqlite3.Connection) -> None:
    """Event subscriptions (:mod:`durabl.stores.sql.subscriptions`): one row per event and
    job type its sending starts."""
    conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {SUBSCRIPTIONS_TABLE} (
            event TEXT NOT NULL,
            type TEXT NOT NULL,
            PRIMARY KEY (event, type)
        ) WITHOUT ROWID
        """
    )


def _add_signals(conn: sqlite3.Connection) -> None:
    """Signals (:mod:`durabl.stores.sql.signals`): kept with their job (deleted with it),
    numbered by ``seq`` in the order stored; read by job, name and ``seq``."""
    conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {SIGNALS_TABLE} (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id TEXT NOT NULL REFERENCES {JOBS_TABLE}(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            data TEXT NOT NULL,
            sent_at INTEGER NOT NULL
        )
        """
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_signals_job ON {SIGNALS_TABLE}(job_id, name, seq)"
    )


def _add_pauses(conn: sqlite3.Connection) -> None:
    """Pausing (:mod:`durabl.model.pauses`): the paused types, which every claim leaves
    out, and a schedule's pause (0 for every schedule stored before)."""
    conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {PAUSED_TYPES_TABLE} (
            type TEXT PRIMARY KEY,
            paused_at INTEGER NOT NULL
        ) WITHOUT ROWID
        """
    )
    conn.execute(f"ALTER TABLE {SCHEDULES_TABLE} ADD COLUMN paused INTEGER NOT NULL DEFAULT 0")


Migration = tuple[int, Callable[[sqlite3.Connection], None]]


def _add_parents(conn: sqlite3.Connection) -> None:
    """Child jobs (``octx.start_children``): a child's parent and its place among the
    children of the step that started it; its parent's children listed and counted by
    status (a gather, the wake of a waiting parent, a cancel's cascade)."""
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN parent_id TEXT")
    conn.execute(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN parent_step TEXT")
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS durabl_parent ON {JOBS_TABLE}(parent_id, status, seq) "
        "WHERE parent_id IS NOT NULL"
    )


MIGRATIONS: list[Migration] = [
    (1, _create_v1),
    (2, _add_done_token),
    (3, _add_reservations),
    (4, _add_schedules),
    (5, _add_job_record),
    (6, _add_flow_control),
    (7, _add_workers),
    (8, _add_trace_context),
    (9, _add_failed_kind),
    (10, _add_search_indexes),
    (11, _reasons_by_status),
    (12, _pending_by_run_at),
    (13, _add_timeout),
    (14, _add_subscriptions),
    (15, _add_signals),
    (16, _add_pauses),
    (17, _add_parents),
]
"""Every schema change, in order. Append; never edit or reorder a released migration."""


#: The way out besides upgrading that a refusal names.
ELSEWHERE = "point this process at another file"


def _schema() -> migrations.VersionedSchema[Migration]:
    # Built per use from MIGRATIONS as it is now (tests append a migration of their own).
    return migrations.VersionedSchema(MIGRATIONS, elsewhere=ELSEWHERE)


def latest_version() -> int:
    return _schema().latest


def _has_meta(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (META_TABLE,)
    ).fetchone()
    return row is not None


def read_version(conn: sqlite3.Connection) -> int:
    """The file's schema version; 0 for a file durabl has never set up."""
    if not _has_meta(conn):
        return 0
    row = conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = ?", (VERSION_KEY,)).fetchone()
    if row is None:
        return 0
    return migrations.stored_version(
        row[0],
        holder=f"SQLite file {_file_of(conn)} (table {META_TABLE})",
        fix=f"restore it from a backup, or {ELSEWHERE}",
    )


def _file_of(conn: sqlite3.Connection) -> str:
    """The main database file of ``conn`` (for error messages)."""
    for _seq, name, file in conn.execute("PRAGMA database_list"):
        if name == "main":
            return str(file)
    return "?"  # pragma: no cover - every connection has a main database


def pending_migrations(version: int, path: str) -> list[Migration]:
    """The migrations the file at ``path``, found at ``version``, still needs (refused when
    a newer release wrote it)."""
    return _schema().pending(version, f"SQLite file {path}")


def apply_migration(conn: sqlite3.Connection, migration: Migration, path: str) -> bool:
    """Apply one migration inside the caller's write transaction, unless another process
    got there first. Returns whether it ran."""
    number, migrate = migration
    conn.execute(f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value TEXT)")
    if not _schema().needs(number, read_version(conn), f"SQLite file {path}"):
        return False
    migrate(conn)
    conn.execute(
        f"INSERT INTO {META_TABLE} (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (VERSION_KEY, str(number)),
    )
    return True
