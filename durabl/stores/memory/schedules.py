"""Schedules in memory: the four primitives of :class:`durabl.stores.base.Backend` over a
dict, under the store's lock (so the compare-and-set and the enqueue are one step)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.stores.base import EnqueueResult


@dataclass
class _Row:
    definition: str
    schedule: Schedule


class MemorySchedules:
    """The schedules of one :class:`~durabl.stores.memory.backend.MemoryBackend`."""

    def __init__(self, lock: threading.RLock, enqueue: Callable[[NewJob], EnqueueResult]) -> None:
        self._lock = lock
        self._enqueue = enqueue
        self._rows: dict[str, _Row] = {}

    def upsert(self, schedule: Schedule, next_run_at: datetime) -> None:
        definition = schedule.definition()
        with self._lock:
            row = self._rows.get(schedule.name)
            if row is not None and row.definition == definition:
                return
            old = row.schedule if row is not None else None
            stored = Schedule.from_stored(
                schedule.name,
                definition,
                next_run_at,
                old.last_run_at if old else None,
                old.last_job_id if old else None,
                old.paused if old else False,  # a pause outlives a redefinition
            )
            self._rows[schedule.name] = _Row(definition, stored)

    def load(self) -> list[Schedule]:
        with self._lock:
            return [self._rows[name].schedule for name in sorted(self._rows)]

    def delete(self, name: str) -> bool:
        with self._lock:
            return self._rows.pop(name, None) is not None

    def fire(
        self,
        schedule: Schedule,
        next_run_at: datetime,
        jobs: Sequence[tuple[datetime, NewJob]],
    ) -> list[str | None] | None:
        """Enqueue ``jobs`` through the backend's enqueue and move the schedule, under the
        store's lock, when the stored schedule still matches ``schedule``."""
        with self._lock:
            row = self._rows.get(schedule.name)
            if (
                row is None
                or row.schedule.next_run_at != schedule.next_run_at
                or row.definition != schedule.definition()
                or row.schedule.paused
            ):
                return None
            ids = [self._enqueue(job).job_id for _tick, job in jobs]
            old = row.schedule
            row.schedule = Schedule.from_stored(
                old.name,
                row.definition,
                next_run_at,
                jobs[-1][0] if jobs else old.last_run_at,
                ids[-1] if jobs else old.last_job_id,
            )
            return ids

    def set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> bool:
        with self._lock:
            row = self._rows.get(name)
            if row is None:
                return False
            moved = row.schedule.next_run_at if next_run_at is None else next_run_at
            row.schedule = replace(row.schedule, paused=paused, next_run_at=moved)
            return True
