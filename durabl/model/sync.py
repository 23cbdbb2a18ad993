"""A one-way event that costs nothing until a thread waits on it.

Every run carries a few "has this happened yet" flags (its abort signal, its end, its
heartbeat's stop), and almost none of them is ever waited on: a short job sets or reads
them and is gone. :class:`threading.Event` builds a condition and a lock up front, which
is a noticeable share of a short job's cost. :class:`Flag` builds its event only for the
first waiter.
"""

from __future__ import annotations

import threading

_CREATE = threading.Lock()  # guards the lazy creation of every Flag's event


class Flag:
    """Like :class:`threading.Event` without ``clear()``: once set, set for good."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def __repr__(self) -> str:
        return f"Flag(set={self._set})"

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or ``timeout`` seconds pass; True when set."""
        if self._set:
            return True
        event = self._event
        if event is None:
            with _CREATE:
                event = self._event
                if event is None:
                    event = self._event = threading.Event()
        # set() may have read _event just before it was published: look at the flag again.
        # (The event is published before this read, and set() writes the flag before it
        # reads _event, so one of the two always sets the event.)
        if self.is_set():
            event.set()
        return event.wait(timeout)
