"""From change notifications to wake-ups: the batches, the timers of jobs due later, and
the read-back of future jobs the stream never announced (docs/change-streams.md,
"Batching, routing and timers"). The :class:`~durabl.stores.mongo.watcher.Watcher` feeds a
:class:`Router` the events it reads; the router wakes the processors through the
listener."""

from __future__ import annotations

import bisect
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from durabl.model.clock import Clock, as_utc
from durabl.stores.base import PushListener
from durabl.stores.mongo.changestream import (
    Lookup,
    NextRunAt,
    PushSettings,
    Waiting,
    frees_a_slot,
)
from durabl.stores.push import WatchedTypes

# The watcher's log: what the router says is the watcher's doing.
logger = logging.getLogger("durabl.stores.mongo.watcher")


class TimerQueue:
    """Future wake-ups ``(run_at, type)``, nearest first, at most ``capacity`` of them.

    A sorted list: insertion is a binary search plus a memmove, cheap at this size, and
    both ends are at hand (the nearest fires, the farthest is dropped when full). Entries
    are datetimes, never timer objects, so a ``run_at`` years away costs one entry and no
    timeout arithmetic.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.dropped = 0
        self._entries: list[tuple[datetime, str]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, at: datetime, type: str) -> tuple[datetime, str] | None:
        """Keep a wake-up; returns the entry dropped to stay within capacity, if any
        (the farthest one, which may be the new one)."""
        entry = (at, type)
        entries = self._entries
        i = bisect.bisect_left(entries, entry)
        if i < len(entries) and entries[i] == entry:
            return None
        if len(entries) < self.capacity:
            entries.insert(i, entry)
            return None
        self.dropped += 1
        if i == len(entries):
            return entry
        dropped = entries.pop()
        entries.insert(i, entry)
        return dropped

    def pop_due(self, now: datetime) -> list[tuple[datetime, str]]:
        """Remove and return every wake-up at or before ``now``."""
        i = bisect.bisect_right(self._entries, now, key=lambda entry: entry[0])
        due = self._entries[:i]
        del self._entries[:i]
        return due

    def next_at(self) -> datetime | None:
        return self._entries[0][0] if self._entries else None

    def clear(self) -> None:
        self._entries.clear()


class Router:
    """Routes the notifications of one watcher to the processors of ``types`` (those this
    process runs), through ``listener``: a batch is collected for the settings'
    ``batch_window``, then each type with claimable jobs is woken once; jobs due later
    wait in :attr:`timers`."""

    def __init__(
        self,
        listener: PushListener,
        settings: PushSettings,
        *,
        clock: Clock,
        now: Callable[[], datetime],
        lookup: Lookup,
        next_run_at: NextRunAt,
        waiting: Waiting,
    ) -> None:
        self._listener = listener
        self._settings = settings
        self._clock = clock
        self._now = now
        self._lookup = lookup
        self._next_run_at = next_run_at
        self._waiting = waiting
        self.watched = WatchedTypes(listener, self._discover_all)
        self.timers = TimerQueue(settings.timer_capacity)
        self._incomplete: set[str] = set()  # types whose future jobs may be missing above
        self._warned_full = False
        # The batch being collected (see _clear_batch).
        self._batch_started: float | None = None
        self._due: Counter[str] = Counter()
        self._lookup_ids: list[Any] = []
        self._freed_ids: list[Any] = []  # jobs that left active, freeing a key's slot
        self._wake_all = False

    @property
    def types(self) -> frozenset[str]:
        """The types processed here (as of the watcher's last step)."""
        return self.watched.current

    def resync(self) -> None:
        """After a start from now (first connect, or a lost token): events before it were
        never seen, so every processed type polls once and future jobs are read back."""
        self._incomplete = set(self.types)
        self.watched.resync()

    def _discover_all(self, types: Sequence[str]) -> None:
        """Read back the future jobs of ``types``: none may be among the timers yet."""
        self._incomplete.update(types)
        self._discover(types)

    def take(self, op: object, event: Mapping[str, Any]) -> None:
        """Take in one change event of operation ``op`` (not an ``invalidate``)."""
        if op in ("insert", "replace"):
            doc = event.get("fullDocument")
            if isinstance(doc, Mapping) and doc.get("status") == "pending":
                self._note(doc.get("type"), doc.get("run_at"))
        elif op == "update":
            key = event.get("documentKey")
            job_id = key.get("_id") if isinstance(key, Mapping) else None
            if job_id is None or len(self._lookup_ids) >= self._settings.max_lookup:
                self._wake_all = True
            else:
                # A job that freed its key's slot may be pending again (a retry): both.
                self._lookup_ids.append(job_id)
                if frees_a_slot(event):
                    self._freed_ids.append(job_id)
            self._open_batch()

    def _note(self, type: object, run_at: object) -> None:
        if not isinstance(type, str) or type not in self.types:
            return
        at = as_utc(run_at) if isinstance(run_at, datetime) else None
        if at is None or at <= self._now():
            self._due[type] += 1
            self._open_batch()
        else:
            self._schedule(at, type)

    def _open_batch(self) -> None:
        if self._batch_started is None:
            self._batch_started = self._clock.monotonic()

    def _schedule(self, at: datetime, type: str) -> None:
        dropped = self.timers.add(at, type)
        if dropped is None:
            return
        self._incomplete.add(dropped[1])
        if not self._warned_full:
            self._warned_full = True
            logger.warning(
                "more than %d future wake-ups pending: the farthest are dropped and those "
                "jobs are found by the safety poll (logged once)",
                self.timers.capacity,
            )

    def flush_if_due(self) -> None:
        """Route the batch once its window has passed: the updated jobs looked up, the
        types with jobs waiting on a freed key found, and each type woken once."""
        started = self._batch_started
        # (A nanosecond of slack: float sums of clock steps land just short of the window.)
        waited = self._clock.monotonic() - started if started is not None else 0.0
        if started is None or waited < self._settings.batch_window - 1e-9:
            return
        due, ids, wake_all = self._due, self._lookup_ids, self._wake_all
        freed = self._freed_ids
        self._clear_batch()
        if freed and not wake_all:
            try:
                due.update(self._waiting(freed, sorted(self.types)))
            except Exception as exc:
                logger.warning("reading the jobs held on freed keys failed, polling: %s", exc)
                wake_all = True
        if ids:
            try:
                rows = list(self._lookup(ids))
            except Exception as exc:
                logger.warning("looking up updated jobs failed, polling every type: %s", exc)
                wake_all = True
                rows = []
            now = self._now()
            for type, run_at in rows:
                if type not in self.types:
                    continue
                at = as_utc(run_at)
                if at <= now:
                    due[type] += 1
                else:
                    self._schedule(at, type)
        for type in sorted(self.types):
            if wake_all:
                self._listener.push_due(type, 0)
            elif due[type]:
                self._listener.push_due(type, due[type])

    def fire_timers(self) -> None:
        """Wake the types whose timers are due (and read back their next future job where
        the timers may not hold it)."""
        if not len(self.timers):
            return
        fired = self.timers.pop_due(self._now())
        if not fired:
            return
        counts = Counter(type for _, type in fired)
        for type, count in sorted(counts.items()):
            if type in self.types:
                self._listener.push_due(type, count)
        self._discover(sorted(t for t in counts if t in self._incomplete))

    def _discover(self, types: Sequence[str]) -> None:
        """Read back the next future ``run_at`` of each type whose future jobs may not all
        be among the timers (jobs stored before the stream started, or timers dropped)."""
        if not types:
            return
        now = self._now()
        for type in types:
            try:
                at = self._next_run_at(type, now)
            except Exception as exc:
                logger.warning("reading the next run_at of %s failed: %s", type, exc)
                continue
            if at is None:
                self._incomplete.discard(type)
            else:
                self._schedule(as_utc(at), type)

    def _clear_batch(self) -> None:
        self._batch_started = None
        self._due = Counter()
        self._lookup_ids = []
        self._freed_ids = []
        self._wake_all = False

    def clear(self) -> None:
        """Forget the batch and the timers (the stream is gone, or its jobs are)."""
        self._clear_batch()
        self.timers.clear()
