"""The runs a queue owns right now: tracked from their claim to their terminal write."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from durabl.model.clock import SYSTEM_CLOCK, Clock, Seconds, to_seconds

T = TypeVar("T")


class RunRegistry(Generic[T]):
    """A thread-safe set of live runs that can be waited on until it empties.

    A run tracks itself once, when it is created from a claim, and untracks itself once
    its outcome is written or its claim handed back; shutdown waits here for the rest.
    ``on_untrack`` is told of each run as it is forgotten (once per run tracked).
    """

    def __init__(
        self, clock: Clock = SYSTEM_CLOCK, *, on_untrack: Callable[[T], object] | None = None
    ) -> None:
        self._clock = clock
        self._on_untrack = on_untrack
        self._changed = threading.Condition(threading.Lock())
        self._runs: set[T] = set()

    def track(self, run: T) -> None:
        with self._changed:
            self._runs.add(run)

    def untrack(self, run: T) -> None:
        """Forget ``run`` (again is harmless), wake whoever waits for the set to empty, and
        tell ``on_untrack`` (the first time only)."""
        with self._changed:
            tracked = run in self._runs
            self._runs.discard(run)
            if not self._runs:  # only "empty" is waited for
                self._changed.notify_all()
        if tracked and self._on_untrack is not None:
            self._on_untrack(run)

    def snapshot(self) -> list[T]:
        """The runs tracked at this moment."""
        with self._changed:
            return list(self._runs)

    def __len__(self) -> int:
        with self._changed:
            return len(self._runs)

    def wait_until_empty(self, timeout: Seconds | None = None) -> bool:
        """Block until no run is tracked, or ``timeout`` seconds pass (None: forever);
        True when empty."""
        wait = None if timeout is None else to_seconds(timeout, "timeout")
        empty: Callable[[], bool] = lambda: not self._runs  # noqa: E731
        with self._changed:
            return self._changed.wait_for(empty, timeout=wait)
