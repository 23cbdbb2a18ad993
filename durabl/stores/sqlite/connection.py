"""Connections to one SQLite file: one per thread, transactions, bounded retries.

Each thread gets its own ``sqlite3.Connection`` (opened on first use, in autocommit mode so
that durabl alone decides where transactions begin and end). Every write is one
``BEGIN IMMEDIATE ... COMMIT``: the write lock is taken up front, so two writers never
deadlock trying to upgrade a read lock. A lock that the busy timeout could not get is tried
again a few times with jittered backoff, then reported as
:class:`~durabl.model.exceptions.BackendUnavailableError`, as is a file that cannot be opened or
written (read-only, a full disk, I/O errors); every other ``sqlite3`` error becomes a
:class:`~durabl.model.exceptions.DurablError`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import quote

from tenacity import stop_after_attempt, stop_after_delay
from tenacity.stop import stop_base

from durabl.model.exceptions import BackendUnavailableError, DurablError, StoreNotFoundError
from durabl.stores.retrying import call_repeating

logger = logging.getLogger(__name__)

R = TypeVar("R")

RETRY_ATTEMPTS = 4
"""Tries of one operation whose lock wait ran past the busy timeout."""
CLOSE_WAIT = 0.1
"""Seconds ``close()`` waits for another thread's connection to go idle before leaving it
to that thread to close after its current operation."""
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
# SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN: the file cannot
# be opened or written (a read-only file or directory, a full disk, I/O trouble).
_UNAVAILABLE_CODES = (3, 8, 10, 13, 14)
_UNAVAILABLE_WORDS = ("disk", "unable to open", "i/o", "readonly", "read-only", "permission")


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` says another connection holds the lock we need."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY_CODES
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def translate(operation: str, exc: BaseException) -> DurablError:
    """A durabl error for a ``sqlite3`` one: lock and I/O trouble is 'unavailable'."""
    code = getattr(exc, "sqlite_errorcode", None)
    unavailable = is_busy(exc) or (
        isinstance(exc, sqlite3.OperationalError)
        and (
            (code is not None and code & 0xFF in _UNAVAILABLE_CODES)
            or any(word in str(exc).lower() for word in _UNAVAILABLE_WORDS)
        )
    )
    if unavailable:
        return BackendUnavailableError(f"SQLite unavailable during {operation}: {exc}")
    return DurablError(f"SQLite error during {operation}: {exc}")


@dataclass(eq=False)
class _Handle:
    """One thread's connection, with the lock that thread holds while it uses it."""

    conn: sqlite3.Connection
    thread: weakref.ref[threading.Thread]
    pid: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    close_requested: bool = False

    def owner_alive(self) -> bool:
        thread = self.thread()
        return thread is not None and thread.is_alive()

    def close_now(self) -> None:
        """Close the connection; the caller holds ``lock`` (or the owner is gone)."""
        if not self.closed:
            self.closed = True
            try:
                self.conn.close()
            except sqlite3.Error as exc:  # pragma: no cover - close rarely fails
                logger.warning("could not close a SQLite connection: %s", exc)


def _close_quietly(handles: list[_Handle]) -> None:
    """Close what a collected :class:`Connections` left open (in this process only)."""
    pid = os.getpid()
    for handle in handles:
        if handle.pid == pid and handle.lock.acquire(blocking=False):
            try:
                handle.close_now()
            finally:
                handle.lock.release()


class Connections:
    """One connection per thread to the file at ``path``, all tracked so ``close_all()``
    can release them.

    Connections are opened with ``check_same_thread=False`` only so that ``close_all()``
    and the sweep of finished threads can close them from another thread; a connection is
    still only ever used by the thread that opened it. Without ``create``, the file must
    exist: SQLite opens it read-write only, never creating it.
    """

    def __init__(
        self, path: str, *, busy_timeout: float, synchronous: str, create: bool = True
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.create = create
        self._local = threading.local()
        self._lock = threading.Lock()
        self._writer = threading.RLock()  # one writer at a time within this process
        # Both lists are only ever changed in place: the finalizer below holds them.
        self._handles: list[_Handle] = []
        self._inherited: list[_Handle] = []
        # A backend dropped without close() still closes its connections when collected.
        # (Not at interpreter exit: a daemon thread may still be inside a statement then.)
        weakref.finalize(self, _close_quietly, self._handles).atexit = False

    # -- opening and closing --------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        """A new connection; without ``create``, through a ``mode=rw`` URI, so that SQLite
        itself refuses a missing file (no check-then-open race)."""
        target, uri = self.path, False
        if not self.create:
            target, uri = f"file:{quote(self.path)}?mode=rw", True
        try:
            return sqlite3.connect(
                target,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
                uri=uri,
            )
        except sqlite3.OperationalError as exc:
            if self.create or os.path.exists(self.path):
                raise
            raise StoreNotFoundError(
                errno.ENOENT, "no SQLite database file (opened with create=False)", self.path
            ) from exc

    def _open(self) -> _Handle:
        conn = self._connect()
        try:
            conn.row_factory = sqlite3.Row
            self._set_busy_timeout(conn, self.busy_timeout)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                logger.warning(
                    "SQLite file %s could not switch to WAL mode (it is in %s mode): "
                    "readers will wait for writers",
                    self.path,
                    mode,
                )
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        pid = os.getpid()
        handle = _Handle(conn, weakref.ref(threading.current_thread()), pid)
        with self._lock:
            self._set_aside_inherited(pid)
            finished = [h for h in self._handles if not h.owner_alive()]
            self._handles[:] = [*(h for h in self._handles if h.owner_alive()), handle]
        for old in finished:  # their threads ended: nobody else can be using them
            old.close_now()
        return handle

    def _set_aside_inherited(self, pid: int) -> None:
        """Move connections inherited across a fork out of the way, keeping a reference so
        that this process never closes them (not even through garbage collection): closing
        a parent's connection in a child is one of SQLite's documented ways to corrupt a
        file. The caller holds ``_lock``."""
        inherited = [h for h in self._handles if h.pid != pid]
        if inherited:
            self._inherited.extend(inherited)
            self._handles[:] = [h for h in self._handles if h.pid == pid]

    def _current(self) -> _Handle:
        handle: _Handle | None = getattr(self._local, "handle", None)
        if handle is None or handle.closed or handle.pid != os.getpid():
            # After a fork the parent's connection is left alone (see _set_aside_inherited).
            handle = self._open()
            self._local.handle = handle
        return handle

    def close_all(self) -> None:
        """Close every connection: idle ones at once, busy ones when their thread's
        current operation ends. Meant for shutdown; a later call opens a fresh one."""
        with self._lock:
            self._set_aside_inherited(os.getpid())
            handles = list(self._handles)
            self._handles.clear()
        for handle in handles:
            handle.close_requested = True
            if handle.lock.acquire(timeout=CLOSE_WAIT):
                try:
                    handle.close_now()
                finally:
                    handle.lock.release()

    def close_current(self) -> None:
        """Close the calling thread's connection, if it has one (a thread about to end)."""
        handle: _Handle | None = getattr(self._local, "handle", None)
        if handle is None or handle.pid != os.getpid():
            return
        with self._lock:
            if handle in self._handles:
                self._handles.remove(handle)
        with handle.lock:
            handle.close_now()
        self._local.handle = None

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held for the duration of the block."""
        depth: int = getattr(self._local, "depth", 0)
        if depth:
            yield self._local.handle.conn  # nested use within one operation
            return
        while True:
            handle = self._current()
            handle.lock.acquire()
            if not handle.closed:
                break
            handle.lock.release()
        self._local.depth = 1
        try:
            yield handle.conn
        finally:
            self._local.depth = 0
            if handle.close_requested:
                handle.close_now()
            handle.lock.release()

    # -- transactions ---------------------------------------------------------------------
    def run(
        self,
        operation: str,
        fn: Callable[[sqlite3.Connection], R],
        *,
        write: bool,
        timeout: float | None = None,
    ) -> R:
        """Run ``fn`` in one transaction (``BEGIN IMMEDIATE`` when ``write``), retrying the
        whole transaction when the lock could not be had within the busy timeout (nothing
        was written then). ``timeout`` bounds the whole wait for the lock, retries
        included."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def attempt() -> R:
            # Threads of this process queue for the write lock here, in order, rather than
            # in SQLite's busy handler, which sleeps and retries (long tails under load).
            wait = self.busy_timeout if deadline is None else deadline - time.monotonic()
            if write and not self._writer.acquire(timeout=max(wait, 0.0)):
                raise sqlite3.OperationalError("database is locked (by this process)")
            try:
                with self.connection() as conn:
                    if deadline is None:
                        return self._transaction(conn, fn, write)
                    self._set_busy_timeout(conn, deadline - time.monotonic())
                    try:
                        return self._transaction(conn, fn, write)
                    finally:
                        self._set_busy_timeout(conn, self.busy_timeout)
            finally:
                if write:
                    self._writer.release()

        try:
            return attempt()  # the common case pays nothing for the retry machinery
        except sqlite3.Error as exc:
            if not is_busy(exc):
                raise translate(operation, exc) from exc
            logger.warning("SQLite file %s is locked during %s, retrying", self.path, operation)

        stop: stop_base = stop_after_attempt(RETRY_ATTEMPTS - 1)
        if deadline is not None:
            stop = stop | stop_after_delay(max(deadline - time.monotonic(), 0.0))
        return call_repeating(
            attempt,
            repeat_on=is_busy,
            stop=stop,
            translate=lambda exc: translate(operation, exc),
            driver_errors=sqlite3.Error,
            before_sleep=lambda state: logger.warning(
                "SQLite file %s is still locked during %s, retrying (retry %d)",
                self.path,
                operation,
                state.attempt_number,
            ),
        )

    @staticmethod
    def _set_busy_timeout(conn: sqlite3.Connection, seconds: float) -> None:
        conn.execute(f"PRAGMA busy_timeout = {max(int(seconds * 1000), 0)}")

    @staticmethod
    def _transaction(
        conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], R], write: bool
    ) -> R:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error as exc:  # the original error matters more
                    logger.warning("could not roll back a SQLite transaction: %s", exc)
            raise
        return result
