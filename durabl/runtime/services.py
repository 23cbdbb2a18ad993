"""A queue's background services as the operator drives them: the reaper, the
scheduler (docs/schedules.md) and the workers registry (docs/operations.md).
:class:`QueueServices` is a base class of :class:`durabl.JobQueue`: its methods are the
queue's own."""

from __future__ import annotations

from typing import Any

from durabl.model.clock import Seconds
from durabl.model.reports import ReapReport, StartReaperResult
from durabl.model.schedule import Schedule, build_schedule
from durabl.model.workers import WorkerInfo
from durabl.runtime.presence import Presence
from durabl.runtime.reaper import ReaperSlot
from durabl.runtime.scheduler import Scheduler
from durabl.runtime.shutdown import Drain
from durabl.stores.base import Backend


class QueueServices:
    """The reaper, scheduler and workers registry of a :class:`durabl.JobQueue`. Uses the
    queue's started store (``_ready()``) and its drain (nothing starts once it is
    shutting down)."""

    scheduler: Scheduler
    presence: Presence
    _reaper: ReaperSlot
    _drain: Drain

    def _ready(self) -> Backend:
        raise NotImplementedError

    # -- reaper ---------------------------------------------------------------------------
    def start_reaper(self, interval: Seconds | None = None) -> StartReaperResult:
        """Sweep once now (``recovered``: how many, None if it failed), then periodically."""
        self._drain.check_open("start_reaper()")
        self._ready()
        return self._reaper.start(interval)

    def reap_once(self, visibility_timeout: Seconds | None = None) -> ReapReport:
        """One recovery sweep now, in this thread (``manage.py reap``, cron): expired
        leases back to pending, stalled at their last attempt, or superseded. Uses the
        queue's visibility timeout unless told otherwise."""
        self._ready()
        return self._reaper.reap_once(visibility_timeout)

    def stop_reaper(self, timeout: float = 5.0) -> None:
        """Stop the periodic sweeps; waits up to ``timeout`` for a sweep under way."""
        self._reaper.stop(timeout)

    # -- schedules ------------------------------------------------------------------------
    def schedule(
        self,
        name: str,
        type: str,
        *,
        cron: str | None = None,
        every: Seconds | None = None,
        data: Any = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
        **enqueue_options: Any,
    ) -> None:
        """Store a schedule now (unchanged when stored with the same definition): ``cron``
        (5 fields, or 6 with seconds first) in ``timezone``, or ``every`` seconds; each
        tick enqueues one job of ``type`` with ``data`` and ``enqueue_options``.
        ``catch_up`` after downtime: ``"latest"``, ``"none"`` or ``"all"``."""
        schedule = build_schedule(
            name,
            type,
            cron=cron,
            every=every,
            data=data,
            timezone=timezone,
            catch_up=catch_up,
            **enqueue_options,
        )
        self._ready()
        self.scheduler.store(schedule)

    def start_scheduler(self) -> None:
        """Store the schedules declared with ``durabl.schedule`` and start the scheduler
        thread (idempotent; ``shutdown()`` stops it). Safe in any number of processes."""
        self._drain.check_open("start_scheduler()")
        self._ready()
        self.scheduler.start_declared()

    def list_schedules(self) -> list[Schedule]:
        """Every schedule in the store, by name, with its next and last tick."""
        return self._ready().load_schedules()

    def delete_schedule(self, name: str) -> bool:
        """Remove a stored schedule; False when there was none. (A declared schedule is
        stored again by the next ``start_scheduler()``.)"""
        return self._ready().delete_schedule(name)

    # -- workers registry -----------------------------------------------------------------
    def list_workers(self) -> list[WorkerInfo]:
        """The worker processes recorded in the store (every queue that runs processors,
        in any process), by host and pid; ``gone`` marks those unseen for three heartbeat
        intervals. An empty list when the store keeps no registry."""
        self._ready()
        return self.presence.workers()
