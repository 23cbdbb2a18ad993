"""Connections to PostgreSQL: the pool, one transaction per operation, bounded retries,
error translation, and URL parsing.

Each operation borrows a connection from a ``psycopg_pool.ConnectionPool`` for exactly one
transaction and sets nothing outside it, so the store works behind PgBouncer in
transaction mode. Errors are sorted by what they leave behind:

- *rolled back* (a serialization failure, a deadlock, a unique violation that a concurrent
  write provoked): nothing was applied, so every operation may run again;
- *ambiguous* (the connection dropped, the server shut down): the transaction may or may
  not have committed, so only operations that are safe to repeat run again (reads,
  enqueues by client-made id, fenced writes answered from receipts);
- anything else is not retried.

Retries are bounded (:data:`RETRY_ATTEMPTS`, :data:`RETRY_MAX_SECONDS`) and jittered; what
is left is a :class:`~durabl.model.exceptions.BackendUnavailableError` (connection trouble,
missing permissions), a :class:`PreparedStatementsError` (psycopg's prepared statements
behind a pooler in transaction mode: a setting to change) or a
:class:`~durabl.model.exceptions.DurablError`.

After a server restart: the store's own pool reconnects within about a second
(:mod:`durabl.stores.postgres.reconnect`), and a connection the server closed while it sat
in the pool is passed over when lent (:meth:`Database.connection`), not used to fail an
operation.
"""

from __future__ import annotations

import logging
import math
import select
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import Cursor
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout
from tenacity import stop_after_attempt, stop_after_delay

from durabl.model.exceptions import BackendUnavailableError, DurablError, PreparedStatementsError
from durabl.stores.postgres.reconnect import POOL_NAME, PromptPool, quiet_reconnect_log
from durabl.stores.retrying import call_repeating

logger = logging.getLogger(__name__)

R = TypeVar("R")

RETRY_ATTEMPTS = 4
RETRY_MAX_SECONDS = 10.0
CONNECT_TIMEOUT = 5
"""Seconds libpq waits for a connection unless the URL sets ``connect_timeout``."""
POOL_TIMEOUT = 10.0
"""Seconds an operation waits for a free pooled connection."""
SCHEMES = ("postgresql", "postgres")
#: Query options the store reads itself; every other one goes to libpq.
STORE_OPTIONS = (
    "table",
    "prepare_threshold",
    "pool_min_size",
    "pool_max_size",
    "listen_notify",
    "safety_poll_interval",
)
#: What a direct connection takes over from a caller's pool's settings.
LISTENER_KWARGS = frozenset({"password", "user", "sslmode", "application_name", "options"})
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_ROLLED_BACK = ("40001", "40P01", "23505")
_DISCONNECTED = ("57P01", "57P02", "57P03")
_DENIED = ("42501", "28000", "28P01", "3D000")


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def with_connect_timeout(url: str, seconds: float) -> str:
    """``url`` with libpq's ``connect_timeout`` set to ``seconds`` (rounded up; libpq's
    least is 2), unless the URL already sets one: the URL's own setting wins."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"connect_timeout must be a positive number of seconds, got {seconds!r}")
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k == "connect_timeout" for k, _ in query):
        return url
    query.append(("connect_timeout", str(max(2, math.ceil(seconds)))))
    return urlunsplit(parts._replace(query=urlencode(query)))


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """Split a ``postgresql://`` URL into the conninfo for libpq and the store's own query
    options (:data:`STORE_OPTIONS`). ``ValueError`` when it is not such a URL."""
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"expected a postgresql:// URL, got {url!r}")
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        parts.port  # noqa: B018 - parses the port: a bad one is a ValueError here
    except ValueError as exc:
        raise ValueError(f"malformed PostgreSQL URL {redact_url(url)}: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"expected a postgresql:// or postgres:// URL, got {redact_url(url)}")
    if parts.fragment:
        raise ValueError(f"a PostgreSQL URL takes no #fragment: {redact_url(url)}")
    options = {k: v for k, v in query if k in STORE_OPTIONS}
    rest = [(k, v) for k, v in query if k not in STORE_OPTIONS]
    if not any(k == "connect_timeout" for k, _ in rest):
        rest.append(("connect_timeout", str(CONNECT_TIMEOUT)))
    conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(rest)))
    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"malformed PostgreSQL URL {redact_url(url)}: {one_line(exc)}") from None
    return conninfo, options


def store_options(query: dict[str, str]) -> dict[str, Any]:
    """The constructor arguments a URL's query gives (``prepare_threshold``: a number or
    ``none``; ``pool_min_size``, ``pool_max_size``: numbers; ``listen_notify``: true
    or false; ``safety_poll_interval``: seconds); ``table`` is read by the constructor
    itself."""
    options: dict[str, Any] = {}
    for name in ("prepare_threshold", "pool_min_size", "pool_max_size"):
        if name in query:
            raw = query[name].strip().lower()
            if name == "prepare_threshold" and raw in ("none", "null", ""):
                options[name] = None
            elif raw.isdigit():
                options[name] = int(raw)
            else:
                raise ValueError(f"{name} must be a whole number in the URL, got {raw!r}")
    if "listen_notify" in query:
        raw = query["listen_notify"].strip().lower()
        if raw not in _BOOLEANS:
            raise ValueError(f"listen_notify must be true or false in the URL, got {raw!r}")
        options["listen_notify"] = _BOOLEANS[raw]
    if "safety_poll_interval" in query:
        raw = query["safety_poll_interval"].strip()
        try:
            options["safety_poll_interval"] = float(raw)
        except ValueError:
            raise ValueError(
                f"safety_poll_interval must be a number of seconds in the URL, got {raw!r}"
            ) from None
    return options


def one_line(exc: BaseException) -> str:
    """The error's message on one line (libpq's run over several)."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text or type(exc).__name__


def is_rolled_back(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.Error) and exc.sqlstate in _ROLLED_BACK


_PREPARED_STATEMENT_STATES = ("26000", "42P05", "08P01")  # does not exist, exists, "requires N"


def is_prepared_statement_mixup(exc: BaseException) -> bool:
    """Whether ``exc`` is the server not knowing, already knowing, or knowing otherwise
    (``bind message supplies 3 parameters, but prepared statement "_pg3_0" requires 5``)
    a statement psycopg prepared: see :class:`PreparedStatementsError`."""
    return (
        isinstance(exc, psycopg.Error)
        and exc.sqlstate in _PREPARED_STATEMENT_STATES
        and 'prepared statement "_pg3_' in str(exc)
    )


def is_disconnect(exc: BaseException) -> bool:
    """The connection was lost mid-operation (not a pool wait: that already waited)."""
    if isinstance(exc, PoolTimeout) or not isinstance(exc, psycopg.OperationalError):
        return False
    if is_prepared_statement_mixup(exc):  # 08P01, yet the connection is fine
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _DISCONNECTED


def translate(operation: str, exc: BaseException, where: str = "") -> DurablError:
    """A durabl error for a psycopg one: callers handle ours, not the driver's."""
    at = f" at {where}" if where else ""
    if is_prepared_statement_mixup(exc):
        return PreparedStatementsError(
            f"PostgreSQL error{at} during {operation}: {one_line(exc)}. psycopg's prepared "
            "statements do not survive between transactions here: a pooler in transaction "
            "mode (PgBouncer before 1.21, or without max_prepared_statements) is in between. "
            "Turn them off: prepare_threshold=none in the URL (prepare_threshold=None; on "
            'your own pool, kwargs={"prepare_threshold": None}); see the PgBouncer section '
            "of docs/postgres.md"
        )
    if isinstance(exc, PoolTimeout):
        return BackendUnavailableError(
            f"PostgreSQL unavailable{at} during {operation}: no connection within "
            f"{POOL_TIMEOUT:g} s ({one_line(exc)})"
        )
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) or (
        isinstance(exc, psycopg.Error) and exc.sqlstate in _DENIED
    ):
        return BackendUnavailableError(
            f"PostgreSQL unavailable{at} during {operation}: {one_line(exc)}"
        )
    return DurablError(f"PostgreSQL error{at} during {operation}: {one_line(exc)}")


SAVEPOINT = "durabl_enqueue"


def caller_connection(connection: object) -> psycopg.Connection[Any]:
    """``connection`` as a caller's psycopg connection that can take a write now:
    ``TypeError`` for anything but a (synchronous) ``psycopg.Connection``, ``ValueError``
    for a closed one or one whose transaction failed or is busy."""
    if not isinstance(connection, psycopg.Connection):
        raise TypeError(
            f"connection= must be an open psycopg (3) Connection, got {type(connection).__name__}"
        )
    if connection.closed:
        raise ValueError("connection= is closed")
    status = connection.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise ValueError(
            "connection= is in a failed transaction: roll it back before enqueueing through it"
        )
    if status not in (TransactionStatus.IDLE, TransactionStatus.INTRANS):
        raise ValueError(f"connection= cannot take a statement now (its state: {status.name})")
    return connection


def run_in_caller_transaction(
    connection: psycopg.Connection[Any],
    operation: str,
    fn: Callable[[Cursor[DictRow]], R],
    where: str = "",
) -> R:
    """Run ``fn`` once inside the transaction open on the caller's ``connection``, under a
    savepoint, so a failure in ``fn`` rolls back only its own work and leaves the caller's
    transaction usable; the caller commits or rolls back. (A connection in non-autocommit
    mode with no transaction yet starts one, as any statement would.) On an autocommit
    connection outside a transaction block, ``fn`` runs in a transaction of its own that
    commits at once. Never retried: the transaction is the caller's."""
    try:
        with connection.cursor(row_factory=dict_row) as cur:
            idle = connection.info.transaction_status == TransactionStatus.IDLE
            if connection.autocommit and idle:
                with connection.transaction():
                    return fn(cur)
            cur.execute(f"SAVEPOINT {SAVEPOINT}")
            try:
                result = fn(cur)
            except BaseException:
                _roll_back_savepoint(connection, cur)
                raise
            cur.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
            return result
    except psycopg.Error as exc:
        raise translate(operation, exc, where) from exc


def _roll_back_savepoint(connection: psycopg.Connection[Any], cur: Cursor[DictRow]) -> None:
    """Undo the savepoint's work (best effort: on a lost connection the original error is
    what the caller needs to see)."""
    if connection.closed:
        return
    try:
        cur.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
        cur.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
    except psycopg.Error:
        logger.warning("could not roll back to the enqueue's savepoint", exc_info=True)


def has_input(fd: int) -> bool:
    """Whether the socket ``fd`` has something to read (or was closed), without waiting."""
    if hasattr(select, "poll"):  # no FD_SETSIZE limit, unlike select()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def went_stale(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server closed ``conn`` while it sat in the pool (a restart, a failover,
    ``pg_terminate_backend``). Nothing is sent to an idle connection, so input waiting on
    its socket is almost always the server's goodbye: only then is it checked, with an
    empty query. Checking every connection would cost every operation a round trip."""
    try:
        if not has_input(conn.fileno()):
            return False
        ConnectionPool.check_connection(conn)
    except (psycopg.Error, OSError, ValueError):
        return True
    return False


class Database:
    """The pool one store uses: its own (made from ``conninfo``, opened at first use and
    closed by :meth:`close`) or the caller's (never closed here)."""

    def __init__(
        self,
        conninfo: str | None,
        pool: ConnectionPool[Any] | None,
        *,
        url: str | None = None,
        prepare_threshold: int | None = 5,
        min_size: int = 1,
        max_size: int = 10,
    ) -> None:
        if (conninfo is None) == (pool is None):
            raise ValueError("PostgresJobQueue needs exactly one of url= and pool=")
        self.conninfo = conninfo
        self.where = redact_url(url) if url else ""
        self.owns_pool = pool is None
        self._pool = pool
        self._prepare_threshold = prepare_threshold
        self._sizes = (min_size, max_size)
        self._lock = threading.Lock()

    def pool(self) -> ConnectionPool[Any]:
        """The pool, opened now if it is ours and not open yet. A server that cannot be
        reached fails here, at once, with the reason libpq gave."""
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._pool is None:
                assert self.conninfo is not None
                kwargs: dict[str, Any] = {
                    "autocommit": True,
                    "prepare_threshold": self._prepare_threshold,
                }
                try:  # one direct try first: the pool would only report a timeout
                    psycopg.connect(self.conninfo, autocommit=True).close()
                except psycopg.Error as exc:
                    raise translate("connect", exc, self.where) from None
                min_size, max_size = self._sizes
                quiet_reconnect_log()
                self._pool = PromptPool(  # reconnects within ~1 s of a server's return
                    self.conninfo,
                    kwargs=kwargs,
                    min_size=min_size,
                    max_size=max_size,
                    timeout=POOL_TIMEOUT,
                    open=False,
                    name=POOL_NAME,
                )
                self._pool.open()
            return self._pool

    def direct_connector(self) -> Callable[[], psycopg.Connection[Any]]:
        """A function that opens a new autocommit connection outside the pool (the push
        listener's), to where the pool connects and as it does."""
        if self.conninfo is not None:
            conninfo, extra = self.conninfo, {}
        else:  # the caller's pool: connect as it does
            pool = self.pool()
            info, kwargs = pool.conninfo, pool.kwargs
            conninfo = info() if callable(info) else info
            given = (kwargs() if callable(kwargs) else kwargs) or {}
            extra = {k: v for k, v in given.items() if k in LISTENER_KWARGS}
        return lambda: psycopg.connect(conninfo, autocommit=True, **extra)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, (None if self.owns_pool else self._pool)
        if self.owns_pool and pool is not None:
            pool.close()

    @contextmanager
    def connection(self, timeout: float | None) -> Iterator[psycopg.Connection[Any]]:
        """A connection from the pool, passing over those the server closed while they sat
        in it (see :func:`went_stale`; the pool replaces them). Without this, after a
        restart each of them would fail one operation, claims included, which are not
        repeated: a worker would back off once per connection its pool held."""
        pool = self.pool()
        for _ in range(pool.max_size):
            with pool.connection(timeout=timeout) as conn:
                if not went_stale(conn):
                    yield conn
                    return
        with pool.connection(timeout=timeout) as conn:  # the pool's own, unchecked
            yield conn

    def attempt(
        self, fn: Callable[[Cursor[DictRow]], R], *, transaction: bool, timeout: float | None
    ) -> R:
        """Run ``fn`` once, in one transaction (or, for a single statement on an
        autocommit connection, as that statement alone)."""
        with self.connection(timeout) as conn, conn.cursor(row_factory=dict_row) as cur:
            if not transaction and conn.autocommit:
                return fn(cur)
            with conn.transaction():
                if timeout is not None:
                    ms = max(int(timeout * 1000), 1)
                    cur.execute(f"SET LOCAL statement_timeout = {ms}")
                return fn(cur)

    def run(
        self,
        operation: str,
        fn: Callable[[Cursor[DictRow]], R],
        *,
        repeatable: bool,
        transaction: bool = True,
        timeout: float | None = None,
    ) -> R:
        """Run ``fn`` (see :meth:`attempt`), again after an error that rolled it back, and
        after a dropped connection only when ``repeatable`` (see the module docstring)."""

        def should_retry(exc: BaseException) -> bool:
            return is_rolled_back(exc) or (repeatable and is_disconnect(exc))

        def once() -> R:
            return self.attempt(fn, transaction=transaction, timeout=timeout)

        try:
            return once()  # the common case pays nothing for the retry machinery
        except psycopg.Error as exc:
            if not should_retry(exc):
                raise translate(operation, exc, self.where) from exc
            logger.warning("PostgreSQL error during %s, retrying: %s", operation, one_line(exc))
        budget = RETRY_MAX_SECONDS if timeout is None else timeout
        return call_repeating(
            once,
            repeat_on=should_retry,
            stop=stop_after_attempt(RETRY_ATTEMPTS - 1) | stop_after_delay(budget),
            translate=lambda exc: translate(operation, exc, self.where),
            driver_errors=psycopg.Error,
        )
