"""PostgreSQL's statements for what a store keeps beside its jobs: schedules, rate limits
and the workers registry (rendered with the others by
:class:`~durabl.stores.postgres.sql.Queries`)."""

from __future__ import annotations

# A rate window is read on the statement's clock (the server's, or the injected one).
RATE_WINDOW = (
    "max_starts, per_ms, window_start, started, "
    "(extract(epoch FROM {now}) * 1000)::bigint AS now_ms"
)


REGISTRY_STATEMENTS: dict[str, str] = {
    # -- schedules ---------------------------------------------------------------------
    "upsert_schedule": (
        "INSERT INTO {schedules} AS s (name, definition, next_run_at) "
        "VALUES (%(name)s, %(definition)s, %(next)s) "
        "ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, "
        "next_run_at = excluded.next_run_at WHERE s.definition <> excluded.definition"
    ),
    "load_schedules": (
        "SELECT name, definition, next_run_at, last_run_at, last_job_id, paused "
        "FROM {schedules} ORDER BY name"
    ),
    "delete_schedule": "DELETE FROM {schedules} WHERE name = %(name)s",
    "advance_schedule": (
        "UPDATE {schedules} SET next_run_at = %(next)s, "
        "last_run_at = coalesce(%(last)s, last_run_at) "
        "WHERE name = %(name)s AND next_run_at = %(expected)s "
        "AND definition = %(definition)s AND NOT paused"
    ),
    "schedule_last_job": "UPDATE {schedules} SET last_job_id = %(job_id)s WHERE name = %(name)s",
    "pause_schedule": (
        "UPDATE {schedules} SET paused = %(paused)s, "
        "next_run_at = coalesce(%(next)s::timestamptz, next_run_at) WHERE name = %(name)s"
    ),
    # -- paused types (durabl.model.pauses): a resume tells every listener the type is due
    "pause_type": (
        "INSERT INTO {paused} (type, paused_at) VALUES (%(type)s, {now}) "
        "ON CONFLICT (type) DO NOTHING"
    ),
    "resume_type": (
        "WITH gone AS (DELETE FROM {paused} WHERE type = %(type)s RETURNING type) "
        "SELECT pg_notify({channel}, '0:' || gone.type) FROM gone"
    ),
    "paused_types": "SELECT type FROM {paused}",
    "type_paused": "SELECT 1 FROM {paused} WHERE type = %(type)s",
    # -- rate limits (durabl.stores.sql.rates): the window read on the store's clock ---
    "rate_upsert": (
        "INSERT INTO {rate_limits} (type, max_starts, per_ms) VALUES (%(type)s, %(limit)s, "
        "%(per)s) ON CONFLICT (type) DO UPDATE SET max_starts = excluded.max_starts, "
        "per_ms = excluded.per_ms"
    ),
    "rate_delete": "DELETE FROM {rate_limits} WHERE type = %(type)s",
    "rate_types": "SELECT type FROM {rate_limits}",
    "rate_read": "SELECT " + RATE_WINDOW + " FROM {rate_limits} WHERE type = %(type)s",
    "rate_lock": "SELECT " + RATE_WINDOW + " FROM {rate_limits} WHERE type = %(type)s FOR UPDATE",
    "rate_count": (
        "UPDATE {rate_limits} SET started = CASE WHEN window_start = %(w)s "
        "THEN started + %(n)s ELSE %(n)s END, window_start = %(w)s WHERE type = %(type)s"
    ),
    # -- the workers registry ----------------------------------------------------------
    "upsert_worker": (
        "INSERT INTO {workers} (id, host, pid, concurrency, started_at, last_seen, active, "
        "heartbeat_interval) VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s::jsonb, "
        "%(started_at)s, %(last_seen)s, %(active)s, %(heartbeat_interval)s) "
        "ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
        "concurrency = excluded.concurrency, started_at = excluded.started_at, "
        "last_seen = excluded.last_seen, active = excluded.active, "
        "heartbeat_interval = excluded.heartbeat_interval"
    ),
    "load_workers": (
        "SELECT id, host, pid, concurrency, started_at, last_seen, active, "
        "heartbeat_interval FROM {workers} ORDER BY id"
    ),
    "delete_worker": "DELETE FROM {workers} WHERE id = %(id)s",
    "prune_workers": "DELETE FROM {workers} WHERE last_seen < %(before)s",
}
