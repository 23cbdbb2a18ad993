"""The reaper: returns jobs of dead workers to pending (or fails them ``stalled``)."""

from __future__ import annotations

import logging
import threading

from durabl.model.clock import Seconds, to_seconds
from durabl.model.reports import JobEvent, ReapReport, StartReaperResult
from durabl.runtime.outages import OutageLog, log_failure
from durabl.runtime.reports import dead_letter
from durabl.runtime.run import Runtime
from durabl.stores.base import Backend

logger = logging.getLogger(__name__)

MAX_SWEEPS_PER_TICK = 20


def default_reaper_interval(visibility_timeout: float) -> float:
    """Sweep often enough that a dead worker's job waits at most about 1.5 timeouts."""
    return max(min(visibility_timeout / 2, 60.0), 0.5)


class Reaper:
    """Periodic sweeps on a named thread; :meth:`sweep` is one step (for tests)."""

    def __init__(self, runtime: Runtime, *, interval: float) -> None:
        self.runtime = runtime
        self.interval = interval
        #: Failed sweeps, and failed prunes: one line as they start failing, one when they
        #: work again.
        self.failures = OutageLog(
            logger, "the reaper's sweep", ("sweep", "sweeps"), clock=runtime.clock
        )
        self.prune_failures = OutageLog(
            logger, "pruning finished jobs", ("prune", "prunes"), clock=runtime.clock
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    def sweep(self) -> ReapReport | None:
        """One sweep, repeated while it comes back saturated (bounded). None on error."""
        total: ReapReport | None = None
        for _ in range(MAX_SWEEPS_PER_TICK):
            try:
                report = self.backend.reap(self.runtime.visibility_timeout)
            except Exception as exc:
                self.failures.failed(exc)
                self.runtime.emit(JobEvent("reaper-error", error=exc))
                return total
            self.failures.succeeded()
            total = report if total is None else _merge(total, report)
            if not report.saturated or self._stop.is_set():
                break
        assert total is not None
        prune_finished(self.runtime, self.prune_failures)
        dead_letter_stalled(self.runtime, total)
        if total.handled:
            logger.info(
                "reaper recovered %d job(s): %d pending again, %d stalled, %d superseded",
                total.handled,
                total.recovered,
                total.stalled,
                total.superseded,
            )
        self.runtime.emit(
            JobEvent("reaper-recovered", handled=total.handled, saturated=total.saturated)
        )
        return total

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="durabl-reaper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sweep()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()


class ReaperSlot:
    """The one periodic reaper of a queue: started at most once at a time, stopped on
    shutdown."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._reaper: Reaper | None = None

    def start(self, interval: Seconds | None) -> StartReaperResult:
        """Sweep once now, then every ``interval`` seconds (None: the default for the
        queue's visibility timeout)."""
        every = default_reaper_interval(self.runtime.visibility_timeout)
        if interval is not None:
            every = to_seconds(interval, "interval")
        if every <= 0:
            raise ValueError("reaper interval must be positive")
        with self._lock:
            if self._reaper is not None and self._reaper.running:
                return StartReaperResult("already-running")
            reaper = Reaper(self.runtime, interval=every)
            self._reaper = reaper
        report = reaper.sweep()
        reaper.start()
        return StartReaperResult("started", report.handled if report is not None else None)

    def reap_once(self, visibility_timeout: Seconds | None = None) -> ReapReport:
        """One recovery sweep now, in this thread, with the queue's visibility timeout
        unless told otherwise."""
        vt = (
            self.runtime.visibility_timeout
            if visibility_timeout is None
            else to_seconds(visibility_timeout, "visibility_timeout")
        )
        report = reap_all(self.runtime.backend, vt)
        prune_finished(self.runtime)
        dead_letter_stalled(self.runtime, report)
        return report

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the periodic sweeps; waits up to ``timeout`` for a sweep under way."""
        with self._lock:
            reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.stop(timeout)


def prune_finished(runtime: Runtime, failures: OutageLog | None = None) -> None:
    """A sweep's retention step: with ``JobQueue(retention=...)`` set, delete the finished
    jobs past it (errors are reported as ``reaper-error`` and logged, through ``failures``
    for the periodic sweeps; the next sweep tries again)."""
    retention = runtime.retention
    if retention is None:
        return
    try:
        pruned = runtime.backend.prune(older_than=retention)
    except Exception as exc:
        if failures is None:
            log_failure(logger, exc, "reaper: pruning finished jobs failed")
        else:
            failures.failed(exc)
        runtime.emit(JobEvent("reaper-error", error=exc, op="prune"))
        return
    if failures is not None:
        failures.succeeded()
    if pruned:
        logger.info("reaper pruned %d finished job(s) older than %g s", pruned, retention)


def dead_letter_stalled(runtime: Runtime, report: ReapReport) -> None:
    """Dead-letter the jobs a sweep of this process failed ``stalled`` (the hook of their
    type, if declared here, and the sink's ``dead-lettered`` event). The report names
    every job it handled, so its jobs are read back only when some stalled."""
    if not report.stalled:
        return
    for job_id in report.job_ids:
        try:
            job = runtime.backend.get_job(job_id)
        except Exception:
            logger.warning("could not read stalled job %s back for its dead letter", job_id)
            continue
        if job is not None and job.status == "failed" and job.failure_kind == "stalled":
            dead_letter(runtime, job.type, job.id, "stalled", job)


def reap_all(backend: Backend, visibility_timeout: float) -> ReapReport:
    """Sweep in this thread until a sweep comes back unsaturated (or handles nothing)."""
    total = ReapReport()
    while True:
        report = backend.reap(visibility_timeout)
        total = _merge(total, report)
        if not report.saturated or not report.handled:
            return total


def _merge(a: ReapReport, b: ReapReport) -> ReapReport:
    return ReapReport(
        a.recovered + b.recovered,
        a.stalled + b.stalled,
        a.superseded + b.superseded,
        b.saturated,
        a.job_ids + b.job_ids,
    )
