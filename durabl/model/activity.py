"""The recent activity of each job type, as the admin's overview charts it: completions and
failures per bucket of a window (say the last hour in 5-minute buckets) and the oldest due
job's wait at each bucket's end (the lag line).

A store reads what these need in one operation (:meth:`durabl.stores.base.Backend.read_activity`):
counts per bucket, and the few jobs that may have waited across a bucket's end
(:class:`WaitCandidate`). Everything else, when a job stopped waiting and which one was the
oldest waiting at each instant, is decided here, once, for every store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from durabl.model.job import FAILURE_KINDS, TERMINAL_STATUSES
from durabl.model.reports import QueueStats

#: The terminal statuses: a job in one of them has a ``finished_at``.
FINISHED_STATUSES: tuple[str, ...] = TERMINAL_STATUSES
#: The statuses a chart counts per bucket, by when the job finished.
COUNTED_STATUSES = ("completed", "failed")
#: How many pending jobs of each type a store reads for the lag line, the earliest due first.
PENDING_SCAN = 20
_MS = timedelta(milliseconds=1)  # stores keep milliseconds


@dataclass(frozen=True)
class ActivityWindow:
    """``buckets`` buckets of ``width`` each, back to back, the last ending at ``until``.
    Bucket ``n`` holds the instants from ``edges[n]`` (included) to ``edges[n + 1]``."""

    until: datetime
    buckets: int = 12
    width: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        if self.buckets < 1:
            raise ValueError(f"an activity window needs at least one bucket, not {self.buckets}")
        if self.width < _MS:
            raise ValueError(f"an activity bucket lasts at least 1 ms, not {self.width}")

    @property
    def since(self) -> datetime:
        return self.until - self.width * self.buckets

    @property
    def edges(self) -> tuple[datetime, ...]:
        """The ``buckets + 1`` instants between and around the buckets, oldest first."""
        return tuple(self.since + self.width * n for n in range(self.buckets + 1))

    @property
    def ends(self) -> tuple[datetime, ...]:
        """Each bucket's end (the instants the lag line is drawn at), oldest first."""
        return self.edges[1:]

    @property
    def width_ms(self) -> int:
        return self.width // _MS

    def bucket(self, at: datetime) -> int | None:
        """The bucket ``at`` falls in, or None outside the window. Stores that count in
        their own query compute the same: ``(at_ms - since_ms) // width_ms`` over
        ``since <= at < until``."""
        if not self.since <= at < self.until:
            return None
        return min((at - self.since) // self.width, self.buckets - 1)


@dataclass(frozen=True)
class WaitCandidate:
    """A job that may have been waiting, due, at the end of a bucket: a pending one, an
    active one claimed in the window, or a finished one whose ``run_at`` to ``finished_at``
    spans a bucket's end. ``starts``: when each attempt of its history started."""

    type: str
    status: str
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    heartbeat_at: datetime | None = None
    starts: tuple[datetime, ...] = ()


@dataclass(frozen=True)
class ActivityRead:
    """What a store read for :func:`type_activity`: ``counts`` maps ``(type, status,
    bucket)`` to how many jobs of ``type`` ended ``status`` (one of
    :data:`COUNTED_STATUSES`) in that bucket (absent: none); ``candidates`` are the jobs
    that may have waited across a bucket's end."""

    counts: Mapping[tuple[str, str, int], int] = field(default_factory=dict)
    candidates: tuple[WaitCandidate, ...] = ()


@dataclass(frozen=True)
class TypeActivity:
    """One type's chart: completions and failures per bucket, and at each bucket's end the
    seconds the oldest due job then waiting had waited since its ``run_at`` (0: none)."""

    completed: tuple[int, ...]
    failed: tuple[int, ...]
    lag: tuple[float, ...]


def wait_end(job: WaitCandidate) -> datetime | None:
    """When ``job`` stopped waiting since its ``run_at``: None while it is pending; for an
    active job its claim (its ``updated_at``, or its heartbeat if earlier); else the start
    of the first recorded attempt from ``run_at`` on (``run_at`` itself, no wait, when the
    record keeps no attempt history)."""
    if job.status == "pending":
        return None
    if job.status == "active":
        beat = job.heartbeat_at
        return job.updated_at if beat is None else min(job.updated_at, beat)
    due = job.run_at - _MS
    return min((s for s in job.starts if s >= due), default=job.run_at)


def lag_series(ends: Sequence[datetime], candidates: Iterable[WaitCandidate]) -> tuple[float, ...]:
    """At each of ``ends``, how long the oldest due job then waiting (created before it,
    due by it, not yet claimed: :func:`wait_end` after it) had waited, in seconds."""
    waits = [(job.created_at, job.run_at, wait_end(job)) for job in candidates]
    lags = []
    for instant in ends:
        since = [
            run_at
            for created, run_at, until in waits
            if created < instant and run_at <= instant and (until is None or until > instant)
        ]
        lags.append((instant - min(since)).total_seconds() if since else 0.0)
    return tuple(lags)


def type_activity(
    window: ActivityWindow, read: ActivityRead, types: Iterable[str]
) -> dict[str, TypeActivity]:
    """The chart of each of ``types`` from what a store read (types it read nothing of get
    empty buckets and no lag)."""
    by_type: dict[str, list[WaitCandidate]] = {}
    for job in read.candidates:
        by_type.setdefault(job.type, []).append(job)
    charts = {}
    for job_type in types:
        completed, failed = (
            tuple(read.counts.get((job_type, status, n), 0) for n in range(window.buckets))
            for status in COUNTED_STATUSES
        )
        lag = lag_series(window.ends, by_type.get(job_type, ()))
        charts[job_type] = TypeActivity(completed, failed, lag)
    return charts


def spans_an_end(window: ActivityWindow, run_at: datetime, finished_at: datetime) -> bool:
    """Whether a job due at ``run_at`` that finished at ``finished_at`` may have waited at
    one of the window's bucket ends (it was due by that end and finished after it): the
    filter a store applies to finished jobs before it reads them as candidates."""
    return any(run_at <= end < finished_at for end in window.ends)


def total_stats(stats: Iterable[QueueStats]) -> QueueStats:
    """The stats of every type together from the stats of each: counts added, the oldest
    due pending job the oldest of all (its lag the largest)."""
    every = list(stats)
    due = [s for s in every if s.oldest_pending_run_at is not None]
    oldest = max(due, key=lambda s: s.oldest_pending_lag, default=None)
    kinds: dict[str, int] = {}
    for kind in FAILURE_KINDS:
        if n := sum(s.failed_by_kind.get(kind, 0) for s in every):
            kinds[kind] = n
    return QueueStats(
        pending=sum(s.pending for s in every),
        active=sum(s.active for s in every),
        completed=sum(s.completed for s in every),
        failed=sum(s.failed for s in every),
        superseded=sum(s.superseded for s in every),
        cancelled=sum(s.cancelled for s in every),
        oldest_pending_run_at=None if oldest is None else oldest.oldest_pending_run_at,
        oldest_pending_lag=0.0 if oldest is None else oldest.oldest_pending_lag,
        failed_by_kind=kinds,
    )
