"""What the stores' push watchers share: the life of the one thread each runs on.

A watcher (MongoDB's change stream, PostgreSQL's LISTEN, SQLite's change check) owns a
:class:`WatcherThread` and keeps only its own loop: the thread is started at most once,
named, a daemon (a read stuck in a driver must never hold the process), stopped with a
bound, and never started again once the watcher stopped or closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

Life = Literal["idle", "running", "ended"]


class WatcherThread:
    """The thread ``name`` that runs ``loop``, and the stop request the loop waits on
    (:attr:`stopping`: set by :meth:`stop`)."""

    def __init__(self, name: str, loop: Callable[[], None]) -> None:
        self.name = name
        self._loop = loop
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

    def stop(self, timeout: float) -> bool | None:
        """Ask the loop to stop and join the thread for at most ``timeout`` seconds. True
        when it has ended (or this is the thread itself, which ends right after its caller
        returns); None when it never started."""
        self.stopping.set()
        with self._lock:
            thread = self._thread
        if thread is None:
            return None
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
