"""Helpers for testing code that uses durabl: a controllable clock and a bounded wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from durabl.clock import Seconds, to_seconds

__all__ = ["FakeClock", "wait_until"]


class FakeClock:
    """A clock that moves only when told. ``now()`` and ``monotonic()`` advance together."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=timezone.utc)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: Seconds) -> datetime:
        """Move time forward; returns the new now."""
        step = to_seconds(seconds, "seconds")
        with self._lock:
            self._now += timedelta(seconds=step)
            self._mono += step
            return self._now


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.005
) -> bool:
    """Poll ``predicate`` until it is truthy or ``timeout`` real seconds pass.

    For end-to-end tests of real threads where no event exists to wait on.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        pause.wait(interval)
