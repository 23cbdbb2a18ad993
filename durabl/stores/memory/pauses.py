"""Paused types in memory: a set under the store's lock, which every claim of
:class:`~durabl.stores.memory.backend.MemoryBackend` reads under the same lock."""

from __future__ import annotations

import threading


class MemoryPauses:
    """The paused types of one :class:`~durabl.stores.memory.backend.MemoryBackend`."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self.types: set[str] = set()

    def pause(self, type: str) -> None:
        with self._lock:
            self.types.add(type)

    def resume(self, type: str) -> bool:
        with self._lock:
            if type not in self.types:
                return False
            self.types.discard(type)
            return True

    def load(self) -> list[str]:
        with self._lock:
            return list(self.types)
