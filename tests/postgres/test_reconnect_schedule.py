"""The schedule on which durabl's pool replaces lost connections, and the log it keeps while
the server is down (no server needed: the outage itself is in ``test_server_outage``)."""

from __future__ import annotations

import logging

from psycopg_pool.base import AttemptWithBackoff

from durabl.stores.postgres.reconnect import (
    FIRST_DELAY,
    JITTER,
    MAX_DELAY,
    POOL_NAME,
    PromptReconnect,
    QuietReconnectLog,
)


def schedule(attempt: AttemptWithBackoff, seconds: float) -> list[float]:
    """The waits ``attempt`` asks for while every attempt fails for ``seconds``."""
    now, waits = 0.0, []
    while not attempt.time_to_give_up(now):
        attempt.update_delay(now)
        waits.append(attempt.delay)
        now += attempt.delay
        if now > seconds:
            break
    return waits


def test_after_a_long_outage_the_next_attempt_is_at_most_a_second_away() -> None:
    waits = schedule(PromptReconnect(timeout=300), seconds=40)
    assert waits[0] <= FIRST_DELAY
    assert max(waits) <= MAX_DELAY
    assert min(waits[5:]) >= MAX_DELAY * (1 - JITTER)  # a second apart, not faster
    # psycopg_pool's own schedule: 16 s between the last two attempts of a 40 s outage
    assert max(schedule(AttemptWithBackoff(timeout=300), seconds=40)) >= 14


def test_it_gives_up_after_the_pools_reconnect_timeout_as_psycopg_pools_does() -> None:
    attempt = PromptReconnect(timeout=5)
    waits = schedule(attempt, seconds=60)
    assert sum(waits) <= 5 + 1e-9
    assert attempt.time_to_give_up(sum(waits))


def record(pool: str, msg: str = "error connecting in %r: %s") -> logging.LogRecord:
    return logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1, msg, (pool, "x"), None)


def test_one_failed_attempt_is_logged_per_interval_for_durabls_pools_only() -> None:
    quiet = QuietReconnectLog(interval=60)
    kept = [quiet.filter(record(POOL_NAME)) for _ in range(5)]
    assert kept == [True, False, False, False, False]
    assert quiet.filter(record("someone-elses-pool"))
    assert quiet.filter(record(POOL_NAME, "discarding closed connection: %s %s"))
