"""Pausing a job type, and pausing a schedule: the rules every store follows. Pure: no I/O.

A paused type is a row (a document, a set member) of the store, so the pause holds for
every process and survives restarts. What it means, on every store:

* no claim takes a job of a paused type: not a worker's poll, not the drain of a key's
  followers (``claim_next_by_key``), not an inline run. A SQL store says so inside the
  claim statement itself (no round trip more per claim); MongoDB, which cannot join the
  jobs with another collection in one ``find_one_and_update``, keeps the set in each
  process (:class:`PausedTypes`);
* enqueue keeps working: the jobs wait, pending, and count in the type's lag;
* ``claim_or_enqueue`` of a paused type stores the job pending and returns no claim, as it
  does when a dedupe key has an active run: the inline run happens nowhere until resumed,
  and a worker runs the job then (:func:`inline_run_allowed`);
* ``run_now`` of a job of a paused type still makes it due: it runs first when resumed;
* jobs already running finish (a pause never touches an active job);
* resuming makes the type's due jobs claimable at once: this process wakes its pollers,
  and the store tells the others where it pushes (PostgreSQL's NOTIFY; SQLite's change
  check sees the commit). MongoDB's other processes see it at their next refresh; one with
  change streams on, which polls rarely, has its watcher re-read the set every
  :data:`PAUSED_RECHECK` seconds while a type is paused and wake the resumed types.

A paused schedule fires no tick; resuming it skips the ticks it missed while paused (its
next tick is the first after the resume, :func:`resumed_next_run_at`), whatever its
``catch_up`` says: a pause is a decision to not run, and a burst on resume would undo it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from durabl.model.options import check_job_type
from durabl.model.reports import QueueStats

#: How old (seconds) a MongoDB process's set of paused types may get before a claim reads
#: it again: a pause made by another process stops this one's claims within this time. It
#: is the default poll interval: a worker that polls stops within about one poll.
PAUSED_TYPES_REFRESH = 5.0
#: A claim of a type the set says is paused reads the set again when it is this old: a
#: resume in another process is picked up within about a second, and the read costs only
#: while a type is paused (a plain job's claim reads nothing).
PAUSED_RECHECK = 1.0


def checked_type(type: str) -> str:
    """``type`` as a job type (``check_job_type``): a ``TypeError`` or ``ValueError`` at the
    call, nothing stored."""
    return check_job_type(type)


def inline_run_allowed(type: str, paused: Iterable[str]) -> bool:
    """Whether ``claim_or_enqueue`` may create a job of ``type`` already claimed: not while
    the type is paused (the job is stored pending instead)."""
    return type not in set(paused)


def resumed_next_run_at(next_tick: Callable[[datetime], datetime], now: datetime) -> datetime:
    """A resumed schedule's next tick: the first strictly after ``now`` (the ticks missed
    while paused are skipped)."""
    return next_tick(now)


class PausedTypes:
    """The paused types as one MongoDB store object knows them, so that a claim reads
    nothing more. Exact for this object's own pauses and resumes (:meth:`note`); replaced
    by the stored set (one read) when older than :data:`PAUSED_TYPES_REFRESH`, or older
    than :data:`PAUSED_RECHECK` when the claimed type is in it. Thread-safe: concurrent
    claims that find it due read it once."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._types: frozenset[str] = frozenset()
        self._loaded_at: float | None = None  # never loaded: the first claim reads it
        self._reading = False
        #: What :meth:`note` learnt while a read was in flight (a set read before this
        #: object's own write committed must not undo it).
        self._since: dict[str, bool] = {}

    def _due(self, type: str) -> bool:
        """Whether a claim of ``type`` should read the set now (True for one caller)."""
        with self._lock:
            if self._reading:
                return False
            if self._loaded_at is not None:
                age = self._monotonic() - self._loaded_at
                limit = PAUSED_RECHECK if type in self._types else PAUSED_TYPES_REFRESH
                if age < limit:
                    return False
            self._reading = True
            self._since = {}
            return True

    def load(self, read_stored: Callable[[], Iterable[str]]) -> None:
        """Replace the set with the stored one (at startup); an error leaves it due."""
        with self._lock:
            self._reading = True
            self._since = {}
        self._read(read_stored)

    def _read(self, read_stored: Callable[[], Iterable[str]]) -> None:
        try:
            stored = frozenset(read_stored())
        except BaseException:
            with self._lock:
                self._reading = False
                self._loaded_at = None
            raise
        with self._lock:
            kept = set(stored)
            for type, paused in self._since.items():
                (kept.add if paused else kept.discard)(type)
            self._types = frozenset(kept)
            self._loaded_at = self._monotonic()
            self._reading = False

    def is_paused(self, type: str, read_stored: Callable[[], Iterable[str]]) -> bool:
        """Whether ``type`` is paused, reading the stored set first when it is due."""
        if self._due(type):
            self._read(read_stored)
        return type in self._types

    def resumed(self, read_stored: Callable[[], Iterable[str]]) -> frozenset[str]:
        """The types this object held paused that the stored set no longer holds (another
        process resumed them), read at most every :data:`PAUSED_RECHECK` seconds and only
        while some type is held paused: a process with push pickup polls rarely, so its
        watcher asks this on each step and wakes the resumed types' pollers."""
        with self._lock:
            before = self._types
        if not before or not self._due(next(iter(before))):
            return frozenset()
        self._read(read_stored)
        with self._lock:
            return before - self._types

    def note(self, type: str, paused: bool) -> None:
        """This object paused (or resumed) ``type``."""
        with self._lock:
            self._types = self._types | {type} if paused else self._types - {type}
            self._since[type] = paused


def with_paused(stats: dict[str, QueueStats], paused: Iterable[str]) -> dict[str, QueueStats]:
    """``stats`` by type with each paused type marked (``QueueStats.paused``), a paused type
    without stored jobs included, by type name."""
    chosen = set(paused)
    rows = dict(stats)
    for type in chosen - set(rows):
        rows[type] = QueueStats()
    return {t: replace(rows[t], paused=t in chosen) for t in sorted(rows)}


def alarming(stats: Mapping[str, QueueStats]) -> dict[str, QueueStats]:
    """The stats, by type, whose lag may be an alarm: a paused type's jobs wait by
    decision, so its lag is none (``durabl health`` and the admin's overview leave it
    out)."""
    return {t: s for t, s in stats.items() if not s.paused}
