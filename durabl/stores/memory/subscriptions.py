"""Event subscriptions in memory: the three primitives of
:class:`durabl.stores.base.Backend` over a set, under the store's lock."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from durabl.model.subscriptions import Subscription


class MemorySubscriptions:
    """The event subscriptions of one :class:`~durabl.stores.memory.backend.MemoryBackend`."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._stored: set[Subscription] = set()

    def upsert(self, subscriptions: Sequence[Subscription]) -> None:
        with self._lock:
            self._stored.update(subscriptions)

    def load(self, event: str | None) -> list[Subscription]:
        with self._lock:
            return [s for s in self._stored if event is None or s.event == event]

    def delete(self, subscription: Subscription) -> bool:
        with self._lock:
            if subscription not in self._stored:
                return False
            self._stored.discard(subscription)
            return True
