"""The statements of a bulk enqueue on PostgreSQL (rendered with the others by
:class:`~durabl.stores.postgres.sql.Queries`): a chunk of jobs is one ``INSERT ... SELECT
FROM unnest(...)`` over one array per column, so a chunk of a thousand jobs is one
statement with one parameter per column, whatever its size."""

from __future__ import annotations

from typing import Any

from durabl.stores.postgres.notifies import notify

#: The columns a new job's row gives (``durabl.stores.sql.rows.new_job_params``), each
#: with the type of its array.
ROW_COLUMNS = (
    ("id", "text"),
    ("type", "text"),
    ("data", "text"),
    ("priority", "integer"),
    ("run_at", "timestamptz"),
    ("max_attempts", "integer"),
    ("dedupe_key", "text"),
    ("dedupe_scope", "text"),
    ("live_slot", "text"),
    ("pending_slot", "text"),
    ("backoff", "text"),
    ("backoff_delay", "double precision"),
    ("backoff_max_delay", "double precision"),
    ("concurrency_key", "text"),
    ("concurrency_limit", "integer"),
    ("trace_context", "text"),
    ("timeout", "double precision"),
    ("parent_id", "text"),
    ("parent_step", "text"),
)

_NAMES = ", ".join(name for name, _ in ROW_COLUMNS)
_ARRAYS = ", ".join(f"%({name})s::{kind}[]" for name, kind in ROW_COLUMNS)
_VALUES = ", ".join(
    "coalesce(s.run_at, {now})" if name == "run_at" else f"s.{name}" for name, _ in ROW_COLUMNS
)

BULK_STATEMENTS: dict[str, str] = {
    # One order for every batch (by the lock's own number), so two batches sharing keys
    # queue behind each other instead of deadlocking.
    "lock_keys": (
        "SELECT pg_advisory_xact_lock({lock_class}, h) FROM "
        "(SELECT DISTINCT hashtext(k) AS h FROM unnest(%(keys)s::text[]) AS k ORDER BY h) AS s"
    ),
    "scope_in_batch": (
        "SELECT dedupe_key, dedupe_scope FROM {jobs} "
        "WHERE live_slot = ANY(%(pending_keys)s::text[]) "
        "OR pending_slot = ANY(%(live_keys)s::text[]) "
        "OR active_slot = ANY(%(live_keys)s::text[]) LIMIT 1"
    ),
    # As insert_pending, for every row of the arrays, in their order; a taken slot leaves
    # its row out. One NOTIFY per type (its earliest due job), not per job: the listeners
    # claim what is due whatever the count.
    "insert_many": (
        "WITH ins AS ("
        f"INSERT INTO {{jobs}} ({_NAMES}, status, created_at, updated_at) "
        f"SELECT {_VALUES}, 'pending', {{now}}, {{now}} "
        f"FROM unnest({_ARRAYS}) WITH ORDINALITY AS s({_NAMES}, n) ORDER BY s.n "
        "ON CONFLICT DO NOTHING RETURNING id, type, run_at), "
        "woken AS (SELECT type, min(run_at) AS run_at FROM ins GROUP BY type) "
        "SELECT ins.id, (SELECT count(*) FROM (SELECT "
        + notify("woken")
        + " FROM woken) AS sent) AS notified FROM ins"
    ),
    # Rows of an earlier attempt of this very insert (its commit's reply was lost).
    "existing_ids": "SELECT id FROM {jobs} WHERE id = ANY(%(ids)s::text[])",
}


def insert_rows(tx: Any, sql: Any, rows: list[dict[str, Any]]) -> list[str | None]:
    """``insert_many`` of ``rows`` (``sql``: the rendered statements), run on ``tx``: the id
    of each row, in order, None where a dedupe slot is taken. A row the insert did not
    return is looked for once: an earlier attempt of this very insert may have committed
    it before its reply was lost."""
    arrays: dict[str, Any] = {name: [row[name] for row in rows] for name, _ in ROW_COLUMNS}
    arrays["now"] = rows[0]["now"]
    made = {r["id"] for r in tx.execute(sql.insert_many, arrays).fetchall()}
    missing = [row["id"] for row in rows if row["id"] not in made]
    if missing:
        made.update(r["id"] for r in tx.execute(sql.existing_ids, {"ids": missing}).fetchall())
    return [row["id"] if row["id"] in made else None for row in rows]
