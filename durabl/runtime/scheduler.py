"""The scheduler: declared schedules, and the thread that enqueues their ticks.

The rules (ticks, catch-up, validation) are :mod:`durabl.model.schedule`'s; the store does
the one atomic step, :meth:`Backend.fire_schedule` (compare-and-set on the schedule's
``next_run_at`` together with the enqueue). So any number of processes may run this
thread over one store: for each tick exactly one of them wins the compare-and-set, and a
process that dies holds nothing (see ``docs/schedules.md``).

Idle cost: one :meth:`Backend.load_schedules` per pass, at most one pass per
:data:`MIN_PASS_INTERVAL`; between passes the thread sleeps until the next due tick (at
most :data:`MAX_SLEEP`, so schedules stored by other processes are seen).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from durabl.model.clock import Clock, Seconds
from durabl.model.options import NewJob
from durabl.model.payload import to_millis
from durabl.model.schedule import Schedule, build_schedule, plan_firing, tick_job
from durabl.runtime.outages import OutageLog, log_failure
from durabl.stores.base import Backend

#: At most one store query per this many seconds per process, however many schedules.
MIN_PASS_INTERVAL = 1.0
#: The longest sleep between passes (to see schedules other processes stored or moved).
MAX_SLEEP = 30.0
#: After a failed pass (the store unreachable), the next one waits at least this long.
ERROR_BACKOFF = 5.0

_declared: dict[str, Schedule] = {}
_declared_lock = threading.Lock()


def declare(
    name: str,
    type: str,
    *,
    cron: str | None = None,
    every: Seconds | None = None,
    data: Any = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    **enqueue_options: Any,
) -> Schedule:
    """``durabl.schedule``: validate and remember a schedule for every queue of this
    process; ``start_scheduler()`` stores it. No I/O. A later declaration of the same name
    replaces the earlier one. The parameters are those of ``queue.schedule``."""
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
    with _declared_lock:
        _declared[schedule.name] = schedule
    return schedule


def declared_schedules() -> list[Schedule]:
    with _declared_lock:
        return list(_declared.values())


def forget_declared(name: str | None = None) -> None:
    """Drop one declaration (or all): for tests."""
    with _declared_lock:
        if name is None:
            _declared.clear()
        else:
            _declared.pop(name, None)


class Scheduler:
    """One queue's scheduler: :meth:`run_once` is one pass; :meth:`start` runs passes on a
    thread named ``durabl-scheduler`` until :meth:`stop`."""

    def __init__(
        self,
        backend: Backend,
        clock: Clock,
        logger: logging.Logger,
        *,
        new_job: Callable[[Schedule, datetime], NewJob] = tick_job,
    ) -> None:
        self.backend = backend
        #: Builds the job of one tick (the queue's: the type's declared defaults apply).
        self.new_job = new_job
        self.clock = clock
        self.logger = logger
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: Passes made (each one store query); for tests and the idle-cost measure.
        self.passes = 0
        #: Failed passes (retried every ERROR_BACKOFF s): one line as they start, one after.
        self.failures = OutageLog(logger, "the scheduler's pass", ("pass", "passes"), clock=clock)

    def _check_store(self) -> None:
        if not self.backend.supports_schedules:
            raise NotImplementedError(f"{type(self.backend).__name__} does not keep schedules")

    def store(self, schedule: Schedule) -> None:
        """Upsert ``schedule`` (unchanged when stored with the same definition)."""
        self._check_store()
        self.backend.upsert_schedule(schedule, schedule.first_tick(self.now()))
        self._wake.set()

    def now(self) -> datetime:
        """This process's clock, to the millisecond. (Not the store's ``now()``, which may
        be a query: a pass costs one query however many schedules it looks at.)"""
        return to_millis(self.clock.now())

    # -- one pass -------------------------------------------------------------------------
    def run_once(self, now: datetime | None = None) -> datetime | None:
        """Load every schedule (one query), fire the due ones, and return the earliest
        next tick (None: no schedule). ``now`` defaults to the scheduler's clock. A
        schedule that fails to fire is logged and tried again at a later pass; a failure to
        load raises."""
        self._check_store()
        self.passes += 1
        schedules = self.backend.load_schedules()
        earliest: datetime | None = None
        for schedule in schedules:
            at = self.now() if now is None else now
            try:
                next_run_at = self._fire(schedule, at)
            except Exception as exc:  # one schedule's trouble (a dedupe scope clash) is its own
                extra = {"schedule": schedule.name}
                log_failure(
                    self.logger, exc, "schedule %s could not fire", schedule.name, extra=extra
                )
                next_run_at = at + timedelta(seconds=ERROR_BACKOFF)
            if next_run_at is not None and (earliest is None or next_run_at < earliest):
                earliest = next_run_at
        return earliest

    def _fire(self, schedule: Schedule, now: datetime) -> datetime | None:
        firing = plan_firing(schedule, now)
        if firing is None:
            return schedule.next_run_at
        jobs = [(tick, self.new_job(schedule, tick)) for tick in firing.ticks]
        ids = self.backend.fire_schedule(schedule, firing.next_run_at, jobs)
        if ids is None:
            self.logger.debug("schedule %s was fired by another process", schedule.name)
        else:
            self.logger.debug(
                "schedule %s enqueued %d job(s)",
                schedule.name,
                len(ids),
                extra={"schedule": schedule.name, "job_ids": ids},
            )
        return firing.next_run_at

    # -- the thread -----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start the thread (idempotent; not after :meth:`stop`)."""
        self._check_store()
        with self._lock:
            if self._stopping or self.running:
                return
            self._thread = threading.Thread(target=self._loop, name="durabl-scheduler", daemon=True)
            self._thread.start()

    def start_declared(self) -> None:
        """Store every schedule declared with ``durabl.schedule`` in this process, then
        :meth:`start`."""
        for schedule in declared_schedules():
            self.store(schedule)
        self.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop and join the thread for at most ``timeout``; True when it ended."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _loop(self) -> None:
        while not self._stopping:
            started = self.clock.monotonic()
            self._wake.clear()  # a wake() from here on cuts the coming sleep short
            try:
                earliest = self.run_once()
            except Exception as exc:
                self.failures.failed(exc)
                wait = ERROR_BACKOFF
            else:
                self.failures.succeeded()
                wait = MAX_SLEEP
                if earliest is not None:
                    until = (earliest - self.now()).total_seconds()
                    wait = min(max(until, 0.0), MAX_SLEEP)
            # At most one pass (one query) per MIN_PASS_INTERVAL, however many schedules.
            elapsed = self.clock.monotonic() - started
            self._wake.wait(max(wait, MIN_PASS_INTERVAL - elapsed))  # stop() sets it
