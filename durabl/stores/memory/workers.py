"""The live workers registry in memory: the four primitives of
:class:`durabl.stores.base.Backend` over a dict, under the store's lock."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime

from durabl.model.workers import WorkerInfo


class MemoryWorkers:
    """The workers registry of one :class:`~durabl.stores.memory.backend.MemoryBackend`."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._rows: dict[str, WorkerInfo] = {}

    def upsert(self, info: WorkerInfo) -> None:
        stored = replace(info, concurrency=dict(info.concurrency), gone=False)
        with self._lock:
            self._rows[info.id] = stored

    def load(self) -> list[WorkerInfo]:
        with self._lock:
            return [replace(r, concurrency=dict(r.concurrency)) for r in self._rows.values()]

    def delete(self, worker_id: str) -> bool:
        with self._lock:
            return self._rows.pop(worker_id, None) is not None

    def prune(self, last_seen_before: datetime) -> int:
        with self._lock:
            old = [k for k, r in self._rows.items() if r.last_seen < last_seen_before]
            for key in old:
                del self._rows[key]
            return len(old)
