"""What the stores' push watchers share: the life of the one thread each runs on.

A watcher (MongoDB's change stream, PostgreSQL's LISTEN, SQLite's change check) owns a
:class:`WatcherThread` and keeps only its own loop: the thread is started at most once,
named, a daemon (a read stuck in a driver must never hold the process), stopped with a
bound, and never started again once the watcher stopped or closed. A watcher that keeps
a connection reopens it as :func:`reconnecting` says, and keeps its pickup state, counters
and events as a :class:`PushState`; :class:`WatchedTypes` follows the types it wakes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from tenacity import RetryCallState, Retrying, wait_random_exponential
from tenacity.retry import retry_base

from durabl.model.reports import JobEvent, PickupMode
from durabl.stores.base import PushListener, PushStatus

Life = Literal["idle", "running", "ended"]


def safety_poll_interval(value: object) -> float:
    """A store's ``safety_poll_interval`` (seconds): how often processors on the default
    poll interval still poll while push pickup is up; a ``ValueError`` unless a positive
    number."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"safety_poll_interval must be a positive number, got {value!r}")
    return float(value)


class WatcherThread:
    """The thread ``name`` that runs ``loop``, and the stop request the loop waits on
    (:attr:`stopping`: set by :meth:`stop`). ``close`` is the watcher's own close, which
    the loop calls as it ends; :meth:`stop` calls it instead when the thread never
    started."""

    def __init__(
        self, name: str, loop: Callable[[], None], close: Callable[[], None] | None = None
    ) -> None:
        self.name = name
        self._loop = loop
        self._close = close
        #: Set by :meth:`stop`: the loop waits on it and ends once it is set.
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> bool:
        """Start the thread, unless it was started before or the watcher stopped or
        closed; True when it started now."""
        with self._lock:
            if self._thread is not None or self._closed or self.stopping.is_set():
                return False
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            thread = self._thread
        thread.start()
        return True

    def stop(self, timeout: float) -> bool:
        """Ask the loop to stop and join the thread for at most ``timeout`` seconds. True
        when it has ended (or this is the thread itself, which ends right after its caller
        returns), or never started (the watcher is closed then)."""
        self.stopping.set()
        with self._lock:
            thread = self._thread
        if thread is None:
            if self._close is not None:
                self._close()
            return True
        if thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def close(self) -> bool:
        """Mark the watcher closed: True the first time only (the caller then releases
        what it holds); a closed watcher's thread never starts."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            return True

    def life(self) -> Life:
        """``idle`` until the thread starts, ``running`` while it is alive, then ``ended``
        (its loop returned, or this is a child process: ``fork()`` copies the watcher but
        not its thread)."""
        thread = self._thread
        if thread is None:
            return "idle"
        return "running" if thread.is_alive() else "ended"


class Backoff(Protocol):
    """A watcher's reconnect settings: jittered exponential backoff from ``retry_backoff``
    seconds up to ``retry_backoff_max``."""

    @property
    def retry_backoff(self) -> float: ...

    @property
    def retry_backoff_max(self) -> float: ...


def reconnecting(
    backoff: Backoff,
    *,
    give_up: Callable[[RetryCallState], bool],
    retry: retry_base,
    pause: Callable[[float], object],
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> Retrying:
    """How a watcher reopens its connection: attempts ``retry`` accepts, apart by
    ``backoff``, each pause through ``pause`` (a wait on the watcher's stop request, so
    :meth:`WatcherThread.stop` is immediate), until ``give_up``; then the last error is
    raised again."""

    def sleep(seconds: float) -> None:
        pause(seconds)

    return Retrying(
        stop=give_up,
        wait=wait_random_exponential(
            multiplier=backoff.retry_backoff, max=backoff.retry_backoff_max
        ),
        retry=retry,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


def close_quietly(close: Callable[[], object], what: str, log: logging.Logger) -> None:
    """Close a watcher's stream or connection; a broken one may fail to, and is gone
    either way."""
    try:
        close()
    except Exception as exc:
        log.debug("closing %s failed: %s", what, exc)


class PushState:
    """The base of a watcher that keeps a connection (MongoDB's change stream, PostgreSQL's
    LISTEN): its pickup state and the reason for it (set on the watcher's thread, read by
    :meth:`push_status` on others: hence the lock), its counters, and the
    ``changestream-*`` events it sends through the listener (each with ``event_extra``)."""

    def __init__(
        self,
        listener: PushListener,
        thread: WatcherThread,
        reason: str,
        event_extra: dict[str, Any] | None = None,
    ) -> None:
        self._listener = listener
        self._thread = thread
        self._lock = threading.Lock()
        self._state = "idle"
        self._reason = reason
        self._event_extra = event_extra or {}
        self._attempt = 0  # of the current (re)connect
        self._connected_once = False
        self.notifications = 0
        self.reconnects = 0

    @property
    def state(self) -> str:
        return self._state

    def push_status(self, *, closed_if_ended: bool = False, **details: object) -> PushStatus:
        """Push while the state is ``push`` (with ``closed_if_ended``: and the thread
        runs), else poll; ``details`` follow the state and the counters."""
        with self._lock:
            state, reason = self._state, self._reason
        if closed_if_ended and state == "push" and self._thread.life() == "ended":
            state, reason = "closed", "the listener thread is not running"
        counters = {"notifications": self.notifications, "reconnects": self.reconnects}
        pickup: PickupMode = "push" if state == "push" else "poll"
        return PushStatus(pickup, reason, {"state": state, **counters, **details})

    def _set_state(self, state: str, reason: str) -> None:
        with self._lock:
            self._state = state
            self._reason = reason

    def _stopping(self) -> bool:
        """True once the watcher is asked to stop or its queue shuts down."""
        return self._thread.stopping.is_set() or self._listener.push_closing()

    def _connecting(self, reason: str) -> None:
        """A (re)connect begins (a reconnect keeps the reason the connection was lost)."""
        if self._connected_once:
            self._set_state("reconnecting", self._reason)
        else:
            self._set_state("connecting", reason)
        self._attempt = 0

    def _connected(self, reason: str, *, resumed: bool, mode_reason: str = "") -> None:
        """Connected: counted, reported, and the processors follow push pickup."""
        if self._connected_once:
            self.reconnects += 1
        self._connected_once = True
        self._set_state("push", reason)
        self._emit("changestream-connected", resumed=resumed, attempts=self._attempt)
        self._listener.push_mode("push", mode_reason or reason)

    def _emit(self, name: str, *, error: BaseException | None = None, **extra: Any) -> None:
        self._listener.emit(JobEvent(name, error=error, extra={**self._event_extra, **extra}))


class WatchedTypes:
    """The types a watcher wakes (:attr:`current`), and those whose future jobs it read back."""

    def __init__(self, listener: PushListener, read_back: Callable[[Sequence[str]], None]) -> None:
        self._listener = listener
        self._read_back = read_back
        self.current: frozenset[str] = frozenset()
        self._read: set[str] = set()

    def refresh(self, *, read_back: bool = True) -> None:
        """Take the types processed now; read back the future jobs of those new since."""
        self.current = self._listener.push_types()
        new = self.current - self._read
        if read_back and new:
            self._read |= new
            self._read_back(sorted(new))

    def resync(self) -> None:
        """After a start from now (nothing before it was seen): every type polls once and
        its future jobs are read back."""
        types = sorted(self.current)
        for type in types:
            self._listener.push_due(type, 0)
        self._read = set(types)
        self._read_back(types)
