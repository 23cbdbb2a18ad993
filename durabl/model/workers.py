"""The live workers registry: what a worker process records about itself in the store, and
when an entry counts as gone or is removed. Pure: the stores keep the records
(``upsert_worker``, ``load_workers``, ``delete_worker``, ``prune_workers``), the runtime's
presence thread writes them (``durabl.runtime.presence``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

#: An entry not refreshed for this many of its heartbeat intervals is reported gone.
GONE_AFTER_INTERVALS = 3
#: A gone entry is removed from the store once unseen for this long.
REMOVE_AFTER = timedelta(hours=1)
#: A change in a worker's count of active runs reaches its entry within this fraction of
#: its heartbeat interval (10 s at the default 100 s) ...
ACTIVE_CHECKS_PER_INTERVAL = 10
#: ... but a worker looks at the count (and, when it changed, writes) at most once a
#: second, however short its interval: a busy worker costs the store a bounded number of
#: writes, never one per job.
MIN_ACTIVE_CHECK_EVERY = 1.0

WorkerState = Literal["alive", "gone"]


@dataclass(frozen=True)
class WorkerInfo:
    """One worker process (one :class:`~durabl.JobQueue` with processors) as recorded in
    the store. ``concurrency`` maps each job type it runs to its worker threads; ``active``
    is how many runs it had at ``last_seen``; ``heartbeat_interval`` is how often it
    refreshes the entry. ``gone`` is True when the entry was not refreshed for three
    intervals (the process died, or cannot reach the store)."""

    id: str
    host: str
    pid: int
    concurrency: dict[str, int] = field(hash=False)
    started_at: datetime
    last_seen: datetime
    active: int
    heartbeat_interval: float
    gone: bool = False

    @property
    def types(self) -> tuple[str, ...]:
        """The job types it runs, sorted."""
        return tuple(sorted(self.concurrency))

    @property
    def state(self) -> WorkerState:
        return "gone" if self.gone else "alive"


def is_gone(info: WorkerInfo, now: datetime) -> bool:
    """Unseen for more than :data:`GONE_AFTER_INTERVALS` of its own heartbeat interval."""
    return now - info.last_seen > timedelta(seconds=GONE_AFTER_INTERVALS * info.heartbeat_interval)


def with_states(infos: list[WorkerInfo], now: datetime) -> list[WorkerInfo]:
    """The entries as the store holds them, each marked gone or not at ``now``, by host,
    pid, then id."""
    marked = [replace(info, gone=is_gone(info, now)) for info in infos]
    return sorted(marked, key=lambda i: (i.host, i.pid, i.id))


def active_check_every(heartbeat_interval: float) -> float:
    """Seconds between a worker's looks at its count of active runs: a count that changed
    since the entry was written is written at the next look, so the entry's ``active``
    trails the truth by at most this much (plus one write), and between two regular
    refreshes a worker writes at most once per look. Never longer than the interval."""
    share = heartbeat_interval / ACTIVE_CHECKS_PER_INTERVAL
    return min(heartbeat_interval, max(share, MIN_ACTIVE_CHECK_EVERY))


def removal_cutoff(now: datetime) -> datetime:
    """Entries last seen before this are removed (:data:`REMOVE_AFTER`)."""
    return now - REMOVE_AFTER
