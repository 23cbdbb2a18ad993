"""Signals in memory: each job's list on its record (``Record.signals``), under the
store's lock; a signal's ``seq`` is its position in the list."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from durabl.model.signals import Signal, StoredSignal
from durabl.stores.memory.store import Record


class MemorySignals:
    """The signals of one :class:`~durabl.stores.memory.backend.MemoryBackend`."""

    def __init__(self, lock: threading.RLock, jobs: dict[str, Record]) -> None:
        self._lock = lock
        self._jobs = jobs

    def store(self, job_id: str, name: str, data: Any, sent_at: datetime) -> int | None:
        with self._lock:
            rec = self._jobs.get(job_id)
            if rec is None or rec.status not in ("pending", "active"):
                return None
            seq = len(rec.signals)
            rec.signals.append(StoredSignal(seq, Signal(name, data, sent_at)))
            return seq

    def next(self, job_id: str, name: str, after_seq: int) -> StoredSignal | None:
        with self._lock:
            rec = self._jobs.get(job_id)
            signals = [] if rec is None else rec.signals
            return next(
                (s for s in signals[after_seq + 1 :] if s.signal.name == name),
                None,
            )
