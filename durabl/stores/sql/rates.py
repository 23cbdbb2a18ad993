"""Rate limits in a SQL store (:mod:`durabl.model.flow`): one row per limited type, its
limit and the claims counted in its current window. A claim reads the row and counts in
the same transaction as the claim itself, so claimers in every process share one window;
the window is read on the store's clock (``now_ms``: the server's on PostgreSQL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from durabl.model.flow import RateLimit
from durabl.stores.sql.statements import Statements, Tx


def write(tx: Tx, s: Statements, type: str, rate: RateLimit | None) -> None:
    if rate is None:
        tx.execute(s.rate_delete, {"type": type})
    else:
        tx.execute(s.rate_upsert, {"type": type, "limit": rate.limit, "per": rate.per_millis})


def read(tx: Tx, s: Statements, type: str, now: Any) -> RateLimit | None:
    row = tx.execute(s.rate_read, {"type": type, "now": now}).fetchone()
    return None if row is None else RateLimit(row["max_starts"], row["per_ms"] / 1000)


def limited_types(tx: Tx, s: Statements) -> list[str]:
    """Every type with a stored limit."""
    return [row["type"] for row in tx.execute(s.rate_types, {}).fetchall()]


@dataclass(frozen=True)
class Allowance:
    """A type's limit, how many more may start in the current window, and the instant
    (epoch ms) that window was read at."""

    rate: RateLimit
    left: int
    now: int


def allowance(
    tx: Tx, s: Statements, type: str, now: Any, *, lock: bool = False
) -> Allowance | None:
    """The type's allowance at ``now`` (the store's parameter), None when it has no limit.
    ``lock``: hold the row until the transaction ends."""
    row = tx.execute(s.rate_lock if lock else s.rate_read, {"type": type, "now": now}).fetchone()
    if row is None:
        return None
    rate = RateLimit(row["max_starts"], row["per_ms"] / 1000)
    at = int(row["now_ms"])
    started = rate.started_in(row["window_start"], row["started"], at)
    return Allowance(rate, rate.allowance(started), at)


def count(tx: Tx, s: Statements, type: str, left: Allowance, n: int) -> None:
    """Count ``n`` claims in the window ``left`` was read in."""
    tx.execute(s.rate_count, {"type": type, "w": left.rate.window_of(left.now), "n": n})
