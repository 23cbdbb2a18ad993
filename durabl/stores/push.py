"""What the stores' push watchers share: the life of the one thread each runs on.

A watcher (MongoDB's change stream, PostgreSQL's LISTEN, SQLite's change check) owns a
:class:`WatcherThread` and keeps only its own loop: the thread is started at most once,
named, a daemon (a read stuck in a driver must never hold the process), stopped with a
bound, and never started again once the watcher stopped or closed. A watcher that keeps
a connection reopens it as :func:`reconnecting` says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal, Protocol

from tenacity import RetryCallState, Retrying, wait_random_exponential
from tenacity.retry import retry_base

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
    pause: Callable[[float], None],
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> Retrying:
    """How a watcher reopens its connection: attempts ``retry`` accepts, apart by
    ``backoff``, each pause through ``pause`` (a wait on the watcher's stop request, so
    :meth:`WatcherThread.stop` is immediate), until ``give_up``; then the last error is
    raised again."""
    return Retrying(
        stop=give_up,
        wait=wait_random_exponential(
            multiplier=backoff.retry_backoff, max=backoff.retry_backoff_max
        ),
        retry=retry,
        sleep=pause,
        before_sleep=before_sleep,
        reraise=True,
    )
