"""Push pickup on PostgreSQL: LISTEN/NOTIFY, one listener connection and thread per queue.

Every write that makes a job pending (an enqueue, a retry with backoff, a release, a
reaper recovery, an operator's ``retry()``) sends ``pg_notify(<channel>, '<ms>:<type>')``
inside its own transaction, so the notification is delivered at commit and never for a
rolled-back write (see :func:`durabl.stores.postgres.notifies.notify`); ``<ms>`` is how long
until the job's ``run_at`` (0: due now), measured on the clock the store uses. Every
write that ends an active run of a job with a concurrency key also sends ``0:<type>`` for
each type with a due job pending on that key (:func:`durabl.stores.postgres.notifies.ends_runs`):
a slot of the key is free, so a job held back on it may start now.

:class:`NotifyListener` holds one autocommit connection that has run ``LISTEN <channel>``
and waits on its socket (``select``, with a self-pipe so that :meth:`stop` is immediate).
A notification for a type this process runs wakes that type's processor at once; one for
a job due later sets a timer for the type (only the nearest per type is kept: when it
fires, the next future ``run_at`` of the type is read back, so no notification is needed
for the ones after it). Types nobody here processes are ignored.

The poll stays on as the safety net: notifications are not stored by the server, so any
sent while the connection is down are lost. When the connection drops (a server restart,
``pg_terminate_backend``, a network failure), the processors go back to their normal poll
interval, the listener reconnects with jittered exponential backoff (tenacity) for as long
as the queue runs, and once it listens again it wakes every processed type once and reads
their future ``run_at`` back, which covers whatever was missed meanwhile.

LISTEN is session state: behind PgBouncer in transaction mode it does not work, so give the
store a direct URL for the listener or turn push off (``listen_notify=False``).
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from tenacity import RetryCallState, retry_if_exception_type

from durabl.stores.base import PushListener, PushStatus
from durabl.stores.postgres.connection import one_line
from durabl.stores.push import PushState, WatchedTypes, WatcherThread, close_quietly, reconnecting

logger = logging.getLogger(__name__)

THREAD_NAME = "durabl-postgres-listen"
TIMER_SLACK = 0.001  # fire a timer this long after the due time, never before it

Connect = Callable[[], "psycopg.Connection[Any]"]
"""Opens a new autocommit connection for the listener (never a pooled one)."""
NextDue = Callable[[Sequence[str]], Mapping[str, float]]
"""``next_due(types)``: seconds until the earliest future ``run_at`` of each type that has one."""


@dataclass(frozen=True)
class ListenSettings:
    """Tuning of the listener; the defaults suit most deployments.

    - ``max_wait``: the longest single wait on the socket; it bounds how late the listener
      notices that its queue shuts down when nobody calls :meth:`NotifyListener.stop`.
    - ``ping_interval``: an idle connection runs ``SELECT 1`` this often, so that one that
      died silently (a network partition) is noticed and replaced.
    - ``retry_backoff``, ``retry_backoff_max``: the jittered exponential backoff between
      reconnect attempts (seconds); attempts go on until the queue stops.
    """

    max_wait: float = 1.0
    ping_interval: float = 30.0
    retry_backoff: float = 0.1
    retry_backoff_max: float = 1.0  # push resumes within about a second of the server

    def __post_init__(self) -> None:
        if not 0 < self.max_wait <= self.ping_interval:
            raise ValueError("max_wait must be positive and at most ping_interval")
        if self.retry_backoff <= 0 or self.retry_backoff_max < self.retry_backoff:
            raise ValueError("retry_backoff must be positive and at most retry_backoff_max")


def parse_payload(payload: str) -> tuple[str | None, float]:
    """``(type, seconds until due)`` from ``'<ms>:<type>'``; ``(None, 0.0)`` (wake every
    type) for anything else, e.g. a bare ``NOTIFY`` someone sent by hand."""
    ms, sep, type = payload.partition(":")
    if not sep or not type:
        return None, 0.0
    try:
        delay = int(ms) / 1000.0
    except ValueError:
        return None, 0.0
    return type, max(delay, 0.0)


def listen_statement(channel: str) -> sql.Composed:
    """``LISTEN "<channel>"``, the channel quoted as an identifier (it may hold a dot)."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


class _Stopped(Exception):
    """The listener is stopping: end the reconnect loop."""


class NotifyListener(PushState):
    """Waits for the store's notifications and wakes the processors they concern.

    The connection, the read-back of future jobs and the clock are injected; :meth:`step`
    is one wait-and-route step, :meth:`start` runs steps on a named thread until
    :meth:`stop` or until the queue shuts down.
    """

    def __init__(
        self,
        connect: Connect,
        listener: PushListener,
        *,
        channel: str,
        next_due: NextDue,
        monotonic: Callable[[], float] = time.monotonic,
        settings: ListenSettings | None = None,
        where: str = "",
    ) -> None:
        self.settings = settings or ListenSettings()
        self.channel = channel
        self.where = where
        self._connect_fn = connect
        self._next_due = next_due
        self._monotonic = monotonic
        # States: idle, connecting, push, reconnecting, closed.
        thread = WatcherThread(THREAD_NAME, self.run, self.close)
        super().__init__(listener, thread, "the listener has not started", {"store": "postgres"})
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._conn: psycopg.Connection[Any] | None = None
        self._last_activity = 0.0
        self._types = WatchedTypes(listener, self.discover)
        #: The nearest known future ``run_at`` of each type, on the monotonic clock.
        self.timers: dict[str, float] = {}
        self.backend_pid: int | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop, and join the thread for at most ``timeout`` seconds (the thread closes its
        connection itself). True when it has ended."""
        self._thread.stopping.set()
        try:
            self._wake_w.send(b"x")
        except OSError:  # already closed, or the buffer is full: either way it wakes
            pass
        return self._thread.stop(timeout)

    def run(self) -> None:
        """The thread: connect, then steps, reconnecting whenever the connection drops."""
        try:
            while not self._stopping():
                if self._conn is None and not self.connect():
                    break
                self.step()
        except Exception as exc:  # a bug here must never stop pickup: the poll goes on
            logger.exception("the PostgreSQL listener failed")
            self._listener.push_mode("poll", f"the PostgreSQL listener failed: {exc!r}")
        finally:
            self.close()

    def close(self) -> None:
        """Close the connection and the wake-up sockets; emit ``changestream-closed``."""
        if not self._thread.close():
            return
        self._drop_connection()
        self._wake_r.close()
        self._wake_w.close()
        self.timers.clear()
        self._set_state("closed", "the listener was closed (shutdown)")
        self._emit("changestream-closed", reason="shutdown")

    def status(self) -> PushStatus:
        return self.push_status(
            closed_if_ended=True,
            channel=self.channel,
            timers=len(self.timers),
            backend_pid=self.backend_pid,
        )

    # -- connecting -----------------------------------------------------------------------
    def connect(self) -> bool:
        """Open the connection and LISTEN, retrying with backoff until it works (True) or
        the listener stops (False). Then every processed type polls once: notifications
        sent before the LISTEN (or while the connection was down) were never seen."""
        self._connecting("connecting the PostgreSQL listener")
        retrying = reconnecting(
            self.settings,
            give_up=lambda _: self._stopping(),
            retry=retry_if_exception_type(psycopg.Error),
            pause=self._thread.stopping.wait,
            before_sleep=self._log_retry,
        )
        try:
            conn = retrying(self._open_once)
        except (_Stopped, psycopg.Error):  # psycopg.Error only once stopping
            return False
        self._conn = conn
        self.backend_pid = conn.info.backend_pid
        self._last_activity = self._monotonic()
        if self._connected_once:
            logger.info("the PostgreSQL listener%s listens again", self._at())
        reason, mode_reason = (
            f"listening on channel {self.channel!r}",
            f"LISTEN on channel {self.channel!r}",
        )
        self._connected(reason, resumed=False, mode_reason=mode_reason)
        self._types.refresh(read_back=False)
        self._types.resync()
        return True

    def _open_once(self) -> psycopg.Connection[Any]:
        if self._stopping():
            raise _Stopped
        self._attempt += 1
        conn = self._connect_fn()
        try:
            conn.execute(listen_statement(self.channel))
        except BaseException:
            close_quietly(conn.close, "the listener connection", logger)
            raise
        return conn

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if state.attempt_number == 1 and exc is not None:
            logger.warning(
                "the PostgreSQL listener%s cannot connect (%s); retrying with backoff, "
                "jobs are found by polling meanwhile",
                self._at(),
                one_line(exc),
            )
        if exc is not None:
            self._emit("changestream-error", error=exc, kind="connect", attempt=self._attempt)

    # -- one step -------------------------------------------------------------------------
    def step(self) -> None:
        """Fire due timers, wait (up to ``max_wait``, the next timer or the next ping) for
        a notification or a wake-up, and route what arrived. A failed connection is
        dropped; the next step reconnects."""
        conn = self._conn
        if conn is None:
            return
        self._types.refresh()
        self._fire_timers()
        now = self._monotonic()
        wait = min(self.settings.max_wait, self._last_activity + self.settings.ping_interval - now)
        nearest = min(self.timers.values(), default=None)
        if nearest is not None:
            wait = min(wait, nearest - now)
        try:
            fd, wake = conn.fileno(), self._wake_r.fileno()
            readable, _, _ = select.select([fd, wake], [], [], max(wait, 0.0))
        except (OSError, ValueError, psycopg.Error) as exc:  # the socket is gone
            self._lost(exc)
            return
        if wake in readable:
            self._drain_wake()
        try:
            if fd in readable:
                self._receive(conn)
            elif self._monotonic() - self._last_activity >= self.settings.ping_interval:
                conn.execute("SELECT 1")
                self._last_activity = self._monotonic()
                self._receive(conn)  # notifications that arrived with the answer
        except psycopg.Error as exc:
            self._lost(exc)

    def handle(self, payload: str, due: Counter[str]) -> None:
        """Take in one notification's payload: count a due job in ``due``, or set a timer."""
        self.notifications += 1
        type, delay = parse_payload(payload)
        if type is None:
            for each in self._types.current:
                due[each] += 0  # present with no count: poll every free slot
            return
        if type not in self._types.current:
            return
        if delay <= 0:
            due[type] += 1
        else:
            self.schedule(type, self._monotonic() + delay)

    def schedule(self, type: str, at: float) -> None:
        """Wake ``type`` at monotonic time ``at`` (only the nearest per type is kept)."""
        at += TIMER_SLACK
        current = self.timers.get(type)
        if current is None or at < current:
            self.timers[type] = at

    def discover(self, types: Sequence[str]) -> None:
        """Read back the next future ``run_at`` of each of ``types`` and set its timer."""
        if not types:
            return
        try:
            found = self._next_due(types)
        except Exception as exc:  # the poll finds those jobs instead
            logger.warning("reading the next run_at of %s failed: %s", ", ".join(types), exc)
            return
        now = self._monotonic()
        for type, seconds in found.items():
            self.schedule(type, now + max(seconds, 0.0))

    # -- internals ------------------------------------------------------------------------
    def _receive(self, conn: psycopg.Connection[Any]) -> None:
        """Route every notification that has arrived, one wake-up per type."""
        due: Counter[str] = Counter()
        for notify in conn.notifies(timeout=0):
            self.handle(notify.payload, due)
        self._last_activity = self._monotonic()
        for type, count in sorted(due.items()):
            self._listener.push_due(type, count)

    def _fire_timers(self) -> None:
        if not self.timers:
            return
        now = self._monotonic()
        fired = sorted(t for t, at in self.timers.items() if at <= now)
        for type in fired:
            del self.timers[type]
            if type in self._types.current:
                self._listener.push_due(type, 0)
        self.discover([t for t in fired if t in self._types.current])

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(64):
                pass
        except OSError:  # nothing left (BlockingIOError) or closed
            pass

    def _lost(self, exc: BaseException) -> None:
        self._drop_connection()
        if self._stopping():
            return
        reason = f"the PostgreSQL listener lost its connection ({one_line(exc)}): reconnecting"
        logger.warning(
            "the PostgreSQL listener%s lost its connection (%s): reconnecting; jobs are found "
            "by polling meanwhile",
            self._at(),
            one_line(exc),
        )
        self._set_state("reconnecting", reason)
        self._emit("changestream-error", error=exc, kind="disconnected", attempt=0)
        self._listener.push_mode("poll", reason)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        self.backend_pid = None
        if conn is not None:
            close_quietly(conn.close, "the listener connection", logger)

    def _at(self) -> str:
        return f" at {self.where}" if self.where else ""
