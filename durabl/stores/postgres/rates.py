"""Rate limits in PostgreSQL (:mod:`durabl.model.flow`) on ``<table>_rate_limits`` (schema
version 4): one row per limited type, its limit and the claims counted in its current
window. A claim of a limited type first reads the row (no lock, no write: a full window
costs a read); with room, it locks the row, recounts, claims at most what is left and
counts in the same transaction, so claimers in every process share one window. A claim of
a type the store object knows has no limit (:class:`~durabl.model.flow.LimitedTypes`: its
own ``set_rate_limit`` calls, and the list of limited types read again when older than
:data:`~durabl.model.flow.RATE_LIMITS_REFRESH`) reads nothing and is one statement."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model.flow import RateLimit
from durabl.stores.postgres.schema import Tables
from durabl.stores.postgres.sql import NOW


@dataclass(frozen=True)
class RateStatements:
    """The statements over one queue's rate limits table."""

    upsert: str
    delete: str
    types: str
    read: str
    lock: str
    count: str

    @classmethod
    def for_tables(cls, t: Tables) -> RateStatements:
        r = t.qualified("_rate_limits")
        columns = (
            "max_starts, per_ms, window_start, started, "
            f"(extract(epoch FROM {NOW}) * 1000)::bigint AS now_ms"
        )
        return cls(
            upsert=(
                f"INSERT INTO {r} (type, max_starts, per_ms) VALUES (%(type)s, %(limit)s, "
                "%(per)s) ON CONFLICT (type) DO UPDATE SET max_starts = excluded.max_starts, "
                "per_ms = excluded.per_ms"
            ),
            delete=f"DELETE FROM {r} WHERE type = %(type)s",
            types=f"SELECT type FROM {r}",
            read=f"SELECT {columns} FROM {r} WHERE type = %(type)s",
            lock=f"SELECT {columns} FROM {r} WHERE type = %(type)s FOR UPDATE",
            count=(
                f"UPDATE {r} SET started = CASE WHEN window_start = %(w)s "
                "THEN started + %(n)s ELSE %(n)s END, window_start = %(w)s WHERE type = %(type)s"
            ),
        )


def write(cur: Cursor[DictRow], rs: RateStatements, type: str, rate: RateLimit | None) -> None:
    if rate is None:
        cur.execute(rs.delete, {"type": type})
    else:
        cur.execute(rs.upsert, {"type": type, "limit": rate.limit, "per": rate.per_millis})


def limited_types(cur: Cursor[DictRow], rs: RateStatements) -> list[str]:
    """Every type with a stored limit."""
    cur.execute(rs.types)
    return [row["type"] for row in cur.fetchall()]


def read(cur: Cursor[DictRow], rs: RateStatements, type: str) -> RateLimit | None:
    cur.execute(rs.read, {"type": type, "now": None})
    row = cur.fetchone()
    return None if row is None else RateLimit(row["max_starts"], row["per_ms"] / 1000)


@dataclass(frozen=True)
class Allowance:
    """A type's limit, how many more may start in the current window, and the instant
    (epoch ms) that window was read at."""

    rate: RateLimit
    left: int
    now: int


def allowance(
    cur: Cursor[DictRow],
    rs: RateStatements,
    type: str,
    now: datetime | None,
    *,
    lock: bool = False,
) -> Allowance | None:
    """The type's allowance at ``now`` (None: the server's clock), None when it has no
    limit. ``lock``: hold the row until the transaction ends."""
    cur.execute(rs.lock if lock else rs.read, {"type": type, "now": now})
    row = cur.fetchone()
    if row is None:
        return None
    rate = RateLimit(row["max_starts"], row["per_ms"] / 1000)
    at = int(row["now_ms"])
    started = row["started"] if row["window_start"] == rate.window_of(at) else 0
    return Allowance(rate, rate.allowance(started), at)


def count(cur: Cursor[DictRow], rs: RateStatements, type: str, left: Allowance, n: int) -> None:
    """Count ``n`` claims in the window ``left`` was read in."""
    cur.execute(rs.count, {"type": type, "w": left.rate.window_of(left.now), "n": n})
