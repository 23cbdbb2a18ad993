"""The store's own connection pool: psycopg_pool's, made to find a server that came back
within about a second.

psycopg_pool replaces each lost connection with attempts that start 1 s apart and double
(1, 2, 4, 8, 16, 32 ... s) until ``reconnect_timeout`` (5 min): after a 40 s outage the
next attempt can come 20 s or more after the server is back, and every operation waits out
the pool timeout meanwhile, with the server up. :class:`PromptPool` keeps psycopg_pool's
machinery and changes only that schedule (:class:`PromptReconnect`): the waits start at
0.1 s, double, and stop growing at about 1 s, each jittered so that many processes do not
reconnect in step. While the server is down that is one connection attempt a second per
lost connection (at most the pool's ``max_size``), each refused at once or ended by libpq's
``connect_timeout``.

psycopg_pool logs every failed attempt as a warning. At one a second per lost connection
that would flood the log during an outage, so :class:`QuietReconnectLog` keeps one of
those lines (for durabl's pools, named :data:`POOL_NAME`) every
:data:`RECONNECT_LOG_INTERVAL` seconds.

The hook is ``ConnectionPool._add_connection(attempt, growing)``, psycopg_pool's own
(3.2 and later): it takes the attempt whose schedule it follows, and builds a default one
when given none. A psycopg_pool without it would simply keep its own schedule.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

POOL_NAME = "durabl-pg-pool"
"""The name of durabl's pools (their threads: ``durabl-pg-pool-worker-N``, ``-scheduler``)."""
FIRST_DELAY = 0.1
"""Seconds before the second attempt to replace a lost connection (the first is at once)."""
MAX_DELAY = 1.0
"""The longest wait between two attempts, before jitter."""
JITTER = 0.25
"""Each wait is shortened by up to this fraction, at random."""
RECONNECT_LOG_INTERVAL = 10.0
"""Seconds between two of psycopg_pool's "error connecting" warnings kept for durabl's pools."""


class PromptReconnect(AttemptWithBackoff):
    """psycopg_pool's reconnection attempt with its waits capped: 0.1 s, then doubling up
    to :data:`MAX_DELAY`, each shortened at random by up to :data:`JITTER`; it gives up
    after ``timeout`` seconds, as psycopg_pool's does."""

    def __init__(self, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self.failures = 0

    def update_delay(self, now: float) -> None:
        if self.failures == 0:
            self.give_up_at = now + self.timeout
        self.failures += 1
        delay = min(MAX_DELAY, FIRST_DELAY * 2.0 ** (self.failures - 1))
        delay *= 1.0 - JITTER * random.random()
        self.delay = min(delay, max(0.0, self.give_up_at - now))


class PromptPool(ConnectionPool[Any]):
    """A ``psycopg_pool.ConnectionPool`` that replaces lost connections on the schedule of
    :class:`PromptReconnect` instead of psycopg_pool's doubling one."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        if attempt is None:
            attempt = PromptReconnect(timeout=self.reconnect_timeout)
        super()._add_connection(attempt, growing=growing)


class QuietReconnectLog(logging.Filter):
    """Keeps one of psycopg_pool's "error connecting in <pool>" warnings about durabl's
    pools every ``interval`` seconds; every other record passes."""

    def __init__(self, interval: float = RECONNECT_LOG_INTERVAL) -> None:
        super().__init__()
        self.interval = interval
        self._last = -float("inf")
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (
            record.msg == "error connecting in %r: %s"
            and isinstance(args, tuple)
            and args
            and args[0] == POOL_NAME
        ):
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval:
                return False
            self._last = now
        return True


_quiet_log = QuietReconnectLog()
_install_lock = threading.Lock()


def quiet_reconnect_log() -> None:
    """Install :class:`QuietReconnectLog` on psycopg_pool's logger (once; at the first pool
    a store makes, never at import)."""
    pool_logger = logging.getLogger("psycopg.pool")
    with _install_lock:
        if _quiet_log not in pool_logger.filters:
            pool_logger.addFilter(_quiet_log)
