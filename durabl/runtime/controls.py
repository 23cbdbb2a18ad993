"""The operator's controls: pausing a job type and pausing, resuming or running a
schedule now. :class:`QueueControls` is a base class of :class:`durabl.JobQueue`: its
methods are the queue's own. What a pause means on every store is
:mod:`durabl.model.pauses`'; the store keeps it and leaves the paused types out of its
claims."""

from __future__ import annotations

from durabl.model.exceptions import ScheduleError
from durabl.model.pauses import alarming, resumed_next_run_at, with_paused
from durabl.model.reports import QueueStats
from durabl.model.schedule import Schedule
from durabl.runtime.catalog import TypeCatalog
from durabl.runtime.worker import Processors
from durabl.stores.base import Backend


class QueueControls:
    """Pause and resume of types and schedules, and the stats that show them. Uses the
    queue's started store (``_ready()``), its processors (woken on a resume) and its type
    catalog (a schedule's job is built as a tick's)."""

    _processors: Processors
    types: TypeCatalog

    def _ready(self) -> Backend:
        raise NotImplementedError

    # -- job types ------------------------------------------------------------------------
    def pause(self, type: str) -> None:
        """Stop every worker of every process from claiming jobs of ``type`` (stored: it
        holds until :meth:`resume`, across restarts). Within a poll interval everywhere
        (at once in this process and wherever the store pushes); running jobs finish;
        enqueue keeps working (the jobs wait, pending); ``claim_or_enqueue`` stores the job
        pending and returns None. Pausing a paused type changes nothing."""
        self._ready().pause_type(type)

    def resume(self, type: str) -> None:
        """Let workers claim ``type`` again: this process's pollers are woken at once, and
        the other processes' where the store pushes (PostgreSQL, SQLite), else at their
        next poll. Resuming a type that is not paused changes nothing."""
        self._ready().resume_type(type)
        self._processors.job_due(type)

    def paused_types(self) -> list[str]:
        """The paused types, sorted (one store read)."""
        return self._ready().paused_types()

    # -- stats with the pauses ------------------------------------------------------------
    def get_stats(self, type: str | None = None) -> QueueStats:
        """Counts of the stored jobs by status (of one ``type``, or all); ``paused`` says
        whether ``type`` is paused (a second read, on a store that keeps pauses)."""
        backend = self._ready()
        stats = backend.get_stats(type)
        if type is None or not backend.supports_pause:
            return stats
        return with_paused({type: stats}, backend.paused_types()).get(type, stats)

    def stats_by_type(self) -> dict[str, QueueStats]:
        """:meth:`get_stats` of every type with stored jobs, and of every paused type, by
        type, read at once (one pass over the jobs where the store can, and one read of
        the pauses); ``durabl.total_stats`` adds them up to what ``get_stats()`` gives."""
        backend = self._ready()
        stats = backend.stats_by_type()
        if not backend.supports_pause:
            return stats
        return with_paused(stats, backend.paused_types())

    def lag_alarms(self) -> dict[str, QueueStats]:
        """The stats of the types whose lag may be an alarm: every type but the paused ones
        (their jobs wait by decision)."""
        return alarming(self.stats_by_type())

    # -- schedules ------------------------------------------------------------------------
    def _schedule_named(self, name: str) -> Schedule:
        if not isinstance(name, str):
            raise TypeError(f"schedule name must be a str, got {type(name).__name__}")
        for schedule in self._ready().load_schedules():
            if schedule.name == name:
                return schedule
        raise ScheduleError(f"no schedule named {name!r} is stored")

    def pause_schedule(self, name: str) -> None:
        """Stop the stored schedule ``name`` from firing, in every process, until
        :meth:`resume_schedule` (stored: it holds across restarts and redeclarations).
        :class:`durabl.ScheduleError` when no schedule has that name."""
        self._schedule_named(name)
        if not self._ready().set_schedule_paused(name, True, None):
            raise ScheduleError(f"no schedule named {name!r} is stored")

    def resume_schedule(self, name: str) -> None:
        """Let schedule ``name`` fire again. The ticks it missed while paused are skipped,
        whatever its ``catch_up``: its next tick is the first after now.
        :class:`durabl.ScheduleError` when no schedule has that name."""
        schedule = self._schedule_named(name)
        backend = self._ready()
        next_run_at = resumed_next_run_at(schedule.next_tick, backend.now())
        if not backend.set_schedule_paused(name, False, next_run_at):
            raise ScheduleError(f"no schedule named {name!r} is stored")

    def run_schedule_now(self, name: str) -> str | None:
        """Enqueue one job of schedule ``name`` now, as a tick would (its type, data and
        options), outside its ticks: its next tick does not move, and a paused schedule
        runs it too. The job's id, or None when its dedupe slot is taken.
        :class:`durabl.ScheduleError` when no schedule has that name."""
        schedule = self._schedule_named(name)
        backend = self._ready()
        job_id = backend.enqueue(self.types.tick_job(schedule, backend.now())).job_id
        if job_id is not None:
            self._processors.job_due(schedule.type)
        return job_id
