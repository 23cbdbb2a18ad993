"""Rate limits on SQLite (:mod:`durabl.model.flow`): one row per limited type, holding the
limit and the claims counted in its current window. A claim reads the row and counts in
the same write transaction, so processes sharing the file share the window."""

from __future__ import annotations

import sqlite3

from durabl.model.flow import RateLimit
from durabl.stores.sqlite.schema import RATE_LIMITS_TABLE

T = RATE_LIMITS_TABLE


def write(conn: sqlite3.Connection, type: str, rate: RateLimit | None) -> None:
    if rate is None:
        conn.execute(f"DELETE FROM {T} WHERE type = ?", (type,))
        return
    conn.execute(
        f"INSERT INTO {T} (type, max_starts, per_ms) VALUES (?, ?, ?) ON CONFLICT (type) "
        "DO UPDATE SET max_starts = excluded.max_starts, per_ms = excluded.per_ms",
        (type, rate.limit, rate.per_millis),
    )


def read(conn: sqlite3.Connection, type: str) -> RateLimit | None:
    row = conn.execute(f"SELECT max_starts, per_ms FROM {T} WHERE type = ?", (type,)).fetchone()
    return None if row is None else RateLimit(row[0], row[1] / 1000)


def allowance(conn: sqlite3.Connection, type: str, now: int) -> tuple[RateLimit, int] | None:
    """The type's limit and how many more may start in the window of ``now`` (epoch ms);
    None when the type has no limit."""
    row = conn.execute(
        f"SELECT max_starts, per_ms, window_start, started FROM {T} WHERE type = ?", (type,)
    ).fetchone()
    if row is None:
        return None
    rate = RateLimit(row[0], row[1] / 1000)
    return rate, rate.allowance(row[3] if row[2] == rate.window_of(now) else 0)


def count(conn: sqlite3.Connection, type: str, rate: RateLimit, now: int, started: int) -> None:
    """Count ``started`` claims in the window of ``now``."""
    window = rate.window_of(now)
    conn.execute(
        f"UPDATE {T} SET started = CASE WHEN window_start = :w THEN started + :n ELSE :n END, "
        "window_start = :w WHERE type = :type",
        {"w": window, "n": started, "type": type},
    )
