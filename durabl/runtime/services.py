"""A queue's background services as the operator drives them: the reaper, the
scheduler (docs/schedules.md) and the workers registry (docs/operations.md).
:class:`durabl.JobQueue` forwards its methods of the same names here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durabl.model.clock import Seconds
from durabl.model.job import ReapReport, StartReaperResult
from durabl.model.schedule import Schedule, build_schedule
from durabl.model.workers import WorkerInfo
from durabl.runtime.forward import takes_as
from durabl.runtime.presence import Presence
from durabl.runtime.reaper import ReaperSlot
from durabl.runtime.scheduler import Scheduler
from durabl.stores.base import Backend


@dataclass(frozen=True)
class QueueServices:
    """``ready`` returns the started store; ``check_open(what)`` refuses ``what`` once
    the queue is shutting down."""

    ready: Callable[[], Backend]
    check_open: Callable[[str], None]
    reaper: ReaperSlot
    scheduler: Scheduler
    presence: Presence

    # -- reaper ---------------------------------------------------------------------------
    def start_reaper(self, interval: Seconds | None = None) -> StartReaperResult:
        """Sweep once now (``recovered``: how many, None if it failed), then periodically."""
        self.check_open("start_reaper()")
        self.ready()
        return self.reaper.start(interval)

    def reap_once(self, visibility_timeout: Seconds | None = None) -> ReapReport:
        """One recovery sweep now, in this thread (``manage.py reap``, cron): expired
        leases back to pending, stalled at their last attempt, or superseded. Uses the
        queue's visibility timeout unless told otherwise."""
        self.ready()
        return self.reaper.reap_once(visibility_timeout)

    def stop_reaper(self, timeout: float = 5.0) -> None:
        """Stop the periodic sweeps; waits up to ``timeout`` for a sweep under way."""
        self.reaper.stop(timeout)

    # -- schedules ------------------------------------------------------------------------
    @takes_as(build_schedule)
    def schedule(self, /, *args: Any, **kwargs: Any) -> None:
        """Store a schedule now (unchanged when stored with the same definition): ``cron``
        (5 fields, or 6 with seconds first) in ``timezone``, or ``every`` seconds."""
        schedule = build_schedule(*args, **kwargs)
        self.ready()
        self.scheduler.store(schedule)

    def start_scheduler(self) -> None:
        """Store the schedules declared with ``durabl.schedule`` and start the scheduler
        thread (idempotent; ``shutdown()`` stops it). Safe in any number of processes."""
        self.check_open("start_scheduler()")
        self.ready()
        self.scheduler.start_declared()

    def list_schedules(self) -> list[Schedule]:
        """Every schedule in the store, by name, with its next and last tick."""
        return self.ready().load_schedules()

    def delete_schedule(self, name: str) -> bool:
        """Remove a stored schedule; False when there was none. (A declared schedule is
        stored again by the next ``start_scheduler()``.)"""
        return self.ready().delete_schedule(name)

    # -- workers registry -----------------------------------------------------------------
    def list_workers(self) -> list[WorkerInfo]:
        """The worker processes recorded in the store (every queue that runs processors,
        in any process), by host and pid; ``gone`` marks those unseen for three heartbeat
        intervals. An empty list when the store keeps no registry."""
        self.ready()
        return self.presence.workers()
