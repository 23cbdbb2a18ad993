"""Managed execution of one claimed job: heartbeat, handler, outcome, terminal write.

The handler's return completes the job; an ``Exception`` retries it (or fails it at
``max_attempts``); :class:`FatalJobError` fails it at once. A run whose lease was lost, or
went unconfirmed past its local deadline, writes nothing: another worker may own the job.
What a handler is given, and may raise, is :mod:`durabl.runtime.handler`; the writes that
end a claim are :mod:`durabl.runtime.ending`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from durabl.model.abort import (
    LEASE_LOST,
    LEASE_UNCONFIRMED,
    SHUTDOWN,
    Handler,
    JobContext,
    LogBuffer,
)
from durabl.model.clock import Clock
from durabl.model.exceptions import FatalJobError
from durabl.model.job import (
    CANCELLED,
    FailureKind,
    Job,
    JobHandle,
    JobResult,
    JournalAppendResult,
)
from durabl.model.options import BackoffPolicy
from durabl.model.payload import check_result
from durabl.model.sync import Flag
from durabl.runtime.completer import Completer
from durabl.runtime.ending import (
    CancelWrite,
    ClaimWrite,
    FailWrite,
    ReleaseWrite,
    SnoozeWrite,
    write_alone,
)
from durabl.runtime.failures import describe_error
from durabl.runtime.handler import (
    HANDED_BACK,
    RunSignal,
    Snooze,
    SuspendRun,
    failure_kind,
    parse_payload,
)
from durabl.runtime.heartbeat import Heartbeat, HeartbeatThread
from durabl.runtime.hooks import RunHooks
from durabl.runtime.outages import log_failure
from durabl.runtime.registry import RunRegistry
from durabl.runtime.reports import (
    NOT_RECORDED,
    EventSink,
    dead_letter,
    emit,
    report_outcome,
)
from durabl.runtime.timeouts import TimeLimitedRun, TimeLimits
from durabl.stores.base import Completion

logger = logging.getLogger(__name__)


class ManagedHandler:
    """A handler that drives its run itself: :class:`ManagedRun` calls
    :meth:`run_managed` with the run (its handle, signal, context and heartbeat) instead of
    ``handler(job, ctx)``. Exceptions of ``fatal_errors`` fail the job at once, as
    :class:`FatalJobError` does. The orchestrator's handlers are built on this."""

    fatal_errors: tuple[type[BaseException], ...] = ()

    def run_managed(self, run: ManagedRun) -> object:
        raise NotImplementedError

    def __call__(self, job: Job[Any], ctx: JobContext) -> object:
        raise TypeError(
            f"{type(self).__name__} runs only under a managed run (queue.process, "
            "queue.register or queue.run_claimed), not called directly"
        )


class Runtime(EventSink, Protocol):
    """What a run needs from its queue: its sinks, store and per-type options
    (:class:`~durabl.runtime.reports.EventSink`), its clock and lease length, the
    registry of its live runs (each tracks itself from its claim until it is over) and
    what wraps every run (``queue.add_run_hook``)."""

    clock: Clock
    visibility_timeout: float
    retention: float | None
    runs: RunRegistry[ManagedRun]
    run_hooks: RunHooks

    def send_event_once(self, event: str, data: Any, dedupe_key: str) -> list[str]:
        """``JobQueue.send_event_once``: what an orchestration's ``send_event`` step does."""

    def wake_signalled(self, job_id: str, name: str, after_seq: int) -> bool:
        """``JobQueue.wake_signalled``: what a signal wait asks once its job is released."""


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: the handler's error (if any) and what the store recorded."""

    error: BaseException | None
    result: JobResult | None
    #: "written" (the store has the outcome), "lease-lost" (write suppressed),
    #: "released" (shutdown took the claim back), "write-failed", "handed-over"
    #: (a completer writes the outcome; the run's ``done`` event is set once it has), or
    #: "abandoned" (past its time limit and grace: the claim was handed back without it).
    disposition: str

    @property
    def status(self) -> str | None:
        return self.result.status if self.result else None


class ManagedRun(TimeLimitedRun):
    """One claim, run once: the one owner of a claim's life.

    Created from a claim, the run tracks itself in its queue's registry; it starts and
    stops its heartbeat, runs the handler inside the queue's run hooks, builds the one
    write that ends its claim (:meth:`_ending`), writes it, reports the outcome as an
    event, and untracks itself once over; on shutdown it hands its claim back instead. In
    a worker pool the write goes to the processor's completer, which batches completions,
    writes the rest one by one, and calls :meth:`completion_written` back; elsewhere the
    run writes in the calling thread. Thread-safe against :meth:`abort_and_release` from
    shutdown.
    """

    runtime: Runtime
    # Set only when the outcome is handed to a completer (the hot path sets neither):
    #: The handler's error, for the report made once the completer has written.
    _error: BaseException | None = None
    #: The lease was lost: no write was handed over, only its report.
    _lost: bool = False

    def __init__(
        self,
        handle: JobHandle[Any],
        handler: Handler,
        runtime: Runtime,
        *,
        heartbeat_interval: float | None = None,
        claimed_at: float | None = None,
        reserved: bool = False,
    ) -> None:
        self.handle = handle
        #: Claimed ahead of a free worker: its start is recorded when its handler begins.
        self.reserved = reserved
        self.handler = handler
        self.runtime = runtime
        clock = runtime.clock
        vt = runtime.visibility_timeout
        start = clock.monotonic() if claimed_at is None else claimed_at
        self.signal = RunSignal(clock, deadline=start + vt)
        self.started_at = start
        #: The handler's lines not stored yet: sent with each renewal and the last write.
        self.logs = LogBuffer(runtime.backend.now)
        self.ctx = JobContext(self.signal, self.logs)
        self.heartbeat = Heartbeat(
            runtime.backend,
            handle.id,
            handle.claim_token,
            signal=self.signal,
            logs=self.logs,
            clock=clock,
            interval=heartbeat_interval or vt / 3,
            visibility_timeout=vt,
            on_lease_lost=self._lease_lost,
        )
        self._lock = threading.Lock()
        self._state = "new"  # new -> running -> finishing -> done | released
        self._lease_event_sent = False
        #: What the handler returned, as the job keeps it (set once it returned).
        self._result: Any = None
        self.done = Flag()
        # Tracked from the claim on, so shutdown sees (and fences) runs not yet started.
        runtime.runs.track(self)

    @property
    def job_id(self) -> str:
        return self.handle.id

    def _lease_lost(self) -> None:
        with self._lock:
            if self._lease_event_sent:
                return
            self._lease_event_sent = True
        op = "heartbeat" if self.signal.reason == LEASE_LOST else "deadline"
        logger.warning(
            "job %s lost its lease (%s); its outcome will not be written",
            self.handle.id,
            self.signal.reason,
            extra={"job_id": self.handle.id, "type": self.handle.type},
        )
        emit(self.runtime, self.handle, "lease-lost", op=op)

    @property
    def started(self) -> bool:
        return self._state != "new"

    def execute(
        self,
        heartbeat_host: HeartbeatThread | None = None,
        completer: Completer[ManagedRun] | None = None,
        limits: TimeLimits | None = None,
    ) -> RunOutcome:
        """Run the handler and record its outcome. Never raises the handler's error.

        A run that shutdown released before it started does nothing. ``heartbeat_host``
        is the calling worker's reusable heartbeat thread, if it has one. With a
        ``completer``, the write that ends the claim is handed to it (outcome
        ``handed-over``): it writes completions in batches and any other write on its own,
        then calls :meth:`completion_written`; the run stays tracked until then. Without
        one, the write is made in the calling thread. ``limits``: the worker pool's watch
        of time limits, which abandons the run one heartbeat interval past its limit."""
        with self._lock:
            if self._state != "new":
                self._over()
                return RunOutcome(None, None, "released")
            self._state = "running"
        started = self.runtime.clock.monotonic()
        if started - self.started_at >= self.heartbeat.interval and not self._renew_first():
            return self._end(None, 0.0, completer)  # lease-lost: the handler never runs
        # Before the start is recorded: a sink sees ``started`` for every run whose
        # attempt the reaper may count if the process dies from here on.
        emit(self.runtime, self.handle, "started", attempt=self.handle.attempts)
        if self.reserved:
            self._mark_started(completer)
        self._start_time_limit(started, limits)
        self.heartbeat.start(heartbeat_host)
        error: BaseException | None = None
        try:
            hooks = self.runtime.run_hooks
            if hooks:
                job = self.handle.as_job()
                value = hooks.call(job, lambda: self._call_handler(job))
            else:
                value = self._call_handler(None)
            self._result = self._kept_result(value)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: a failed attempt
            error = exc
        finally:
            self.heartbeat.stop()
        return self._end(error, self.runtime.clock.monotonic() - started, completer)

    def _end(
        self, error: BaseException | None, duration: float, completer: Completer[ManagedRun] | None
    ) -> RunOutcome:
        outcome: RunOutcome | None = None
        try:
            outcome = self._finish(error, duration, completer)
            return outcome
        finally:
            if outcome is None or outcome.disposition not in ("handed-over", "abandoned"):
                self._over()

    @staticmethod
    def _kept_result(value: object) -> Any:
        """The handler's return value as the job keeps it; a value no store can keep fails
        the run at once (``FatalJobError`` naming its type)."""
        if value is None:
            return None
        try:
            return check_result(value)
        except (TypeError, ValueError) as exc:
            raise FatalJobError(str(exc)) from None

    def _call_handler(self, job: Job[Any] | None) -> object:
        job = self.handle.as_job() if job is None else job
        job = parse_payload(self.runtime.type_options(job.type), job)
        if isinstance(self.handler, ManagedHandler):
            return self.handler.run_managed(self)
        return self.handler(job, self.ctx)

    def _over(self) -> None:
        """The run is over (written, lost, released or refused): nobody waits for it."""
        self.runtime.runs.untrack(self)
        self.done.set()
        self._forget_time_limit()

    # -- fenced writes a managed handler issues through its run ----------------------------
    def renew(self) -> str | None:
        """Renew the lease now: "applied", "lease-lost", or None after an error."""
        return self.heartbeat.beat()

    def append_journal(self, entries: list[dict[str, Any]], position: int) -> JournalAppendResult:
        """Append orchestration journal entries at ``position``, fenced on this claim."""
        handle = self.handle
        return self.runtime.backend.append_journal(
            handle.id, handle.claim_token, entries, position=position
        )

    def _mark_started(self, completer: Completer[ManagedRun] | None) -> None:
        """A reserved claim's handler is about to start: record it, so the reaper counts
        this run if the process dies now. Written with the completer's next batch (no
        round trip of its own); see :mod:`durabl.model.rules` for the small window this leaves."""
        claim = (self.handle.id, self.handle.claim_token)
        if completer is not None:
            completer.mark_started(*claim)
            return
        try:
            self.runtime.backend.mark_started([claim])
        except Exception:
            logger.warning("could not record the start of job %s", claim[0], exc_info=True)

    def _renew_first(self) -> bool:
        """A claim that waited a heartbeat interval for a worker (read ahead behind slower
        runs than expected) renews its lease before the handler starts. False when the
        lease is gone, or went unconfirmed past its deadline: the job may be someone
        else's by now, so it must not run here."""
        self.heartbeat.beat()
        return not self.signal.aborted

    def _finish(
        self,
        error: BaseException | None,
        duration: float,
        completer: Completer[ManagedRun] | None = None,
    ) -> RunOutcome:
        with self._lock:
            if self._state != "running":
                return RunOutcome(error, None, "abandoned" if self.abandoned else "released")
            self._state = "finishing"
        # Decided here, once the heartbeat has stopped: nothing aborts the signal later.
        lost = self.signal.aborted and self.signal.reason in (LEASE_LOST, LEASE_UNCONFIRMED)
        error = self._past_time_limit(error)
        handed_over = False
        try:
            write = None if lost else self._ending(error)
            if completer is None:
                return self._write_here(error, duration, write)
            if error is not None:
                self._error = error
            if lost:
                self._lost = True
            # The completer renews the lease until the outcome is written (none when lost).
            completer.submit(self, write, duration, lease=None if lost else self.heartbeat)
            handed_over = True
            if isinstance(error, HANDED_BACK):
                error = None  # a suspension or a snooze is how the run ended, not a failure
            return RunOutcome(error, None, "handed-over")
        finally:
            if not handed_over:
                with self._lock:
                    self._state = "done"

    def _ending(self, error: BaseException | None) -> ClaimWrite:
        """The one write that ends this claim, built here only: what the handler's
        ``error`` (None: it returned) means for the job, with the lines it logged."""
        job = self.handle
        logs = self.logs.take()  # once: a write tried again carries the same lines
        if self._timed_out:
            return self._timed_out_write(error, logs)
        if error is None:
            return Completion(job.id, job.claim_token, logs, self._result)
        if self.signal.aborted and self.signal.reason == CANCELLED:
            return CancelWrite(job.id, job.claim_token, logs)
        if isinstance(error, SuspendRun):
            return ReleaseWrite(
                job.id, job.claim_token, logs, run_at=error.run_at, then=error.after_release
            )
        if isinstance(error, Snooze):
            return SnoozeWrite(job.id, job.claim_token, logs, error.seconds)
        kind = self._kind(error)
        if kind == "invalid-payload":
            return FailWrite(job.id, job.claim_token, str(error), logs, kind)
        if kind == "fatal":
            return FailWrite(job.id, job.claim_token, describe_error(error), logs, kind)
        backoff = BackoffPolicy.for_job(job)  # retried unless this was the last attempt
        reason = describe_error(error)
        return FailWrite(job.id, job.claim_token, reason, logs, kind, backoff, job.attempts)

    def _write_here(
        self, error: BaseException | None, duration: float, write: ClaimWrite | None
    ) -> RunOutcome:
        """Write ``write`` in the calling thread (none when the lease was lost), one try,
        and report it."""
        result: JobResult | Exception | None = None
        if write is not None:
            try:
                result = write_alone(self.runtime.backend, write)
            except Exception as exc:
                result = exc
        disposition = self._reported(error, result, duration)
        if isinstance(error, HANDED_BACK):
            error = None  # a suspension or a snooze is how the run ended, not a failure
        return RunOutcome(error, result if isinstance(result, JobResult) else None, disposition)

    def completion_written(self, result: JobResult | Exception, duration: float) -> None:
        """The completer's call once the write this run handed it is recorded
        (``result``), or could not be (the error), or, with the lease lost, was not made:
        report it, and let shutdown and ``done`` waiters know the run is over."""
        try:
            self._reported(self._error, None if self._lost else result, duration)
        finally:
            with self._lock:
                self._state = "done"
            self._over()

    def _reported(
        self, error: BaseException | None, result: JobResult | Exception | None, duration: float
    ) -> str:
        """Report how the claim ended: ``result`` of its ending write, the error that kept
        the write from being recorded, or None when the lease was lost (nothing written).
        The outcome's disposition (see :class:`RunOutcome`)."""
        if result is None:
            self._lease_lost()
            return "lease-lost"
        if isinstance(result, Exception):
            self._write_failed(result)
            return "write-failed"
        kind = None if error is None else self._kind(error)
        fatal = kind in ("fatal", "invalid-payload")
        report_outcome(self.runtime, self.handle, error, result, duration, fatal=fatal, kind=kind)
        status = result.status
        if self._timed_out and status not in NOT_RECORDED:
            self._report_timed_out(duration, terminal=status == "failed-terminal")
        if kind is not None and status == "failed-terminal":
            dead_letter(self.runtime, self.handle.type, self.handle.id, kind)
        return "lease-lost" if status in NOT_RECORDED else "written"

    def _write_failed(self, exc: BaseException) -> None:
        extra = {"job_id": self.handle.id, "type": self.handle.type}
        message = "could not record the outcome of job %s; the reaper will recover it"
        log_failure(logger, exc, message, self.handle.id, extra=extra)

    def _kind(self, error: BaseException) -> FailureKind:
        """The failure kind a terminal failure with ``error`` is recorded as."""
        if self._timed_out:
            return "timed-out"
        handler = self.handler
        fatal = handler.fatal_errors if isinstance(handler, ManagedHandler) else ()
        return failure_kind(error, fatal)

    def abort(self, reason: str) -> bool:
        """Fence the run without writing: abort its handler and stop its heartbeat (no
        wait). A run not yet started never starts. False when it already finished."""
        unstarted = self._fence(reason, 0)
        if unstarted is None:
            return False
        if unstarted:
            self._over()
        return True

    def abort_and_release(self, timeout: float) -> JobResult | None:
        """Shutdown's path: abort the handler, stop the heartbeat, hand the claim back
        (no attempt used). None when the run already finished or is finishing. A run not
        yet started is released and will never start."""
        unstarted = self._fence(SHUTDOWN, timeout)
        if unstarted is None:
            return None
        try:
            return self._release(timeout)
        finally:
            if unstarted:
                self._over()

    def _fence(self, reason: str, timeout: float) -> bool | None:
        """Mark the run released, abort its handler with ``reason`` and stop its
        heartbeat (waiting up to ``timeout``): whether it had not started yet, or None
        when it already finished or is finishing."""
        with self._lock:
            if self._state not in ("new", "running"):
                return None
            unstarted = self._state == "new"
            self._state = "released"
        self.signal.abort(reason)
        self.heartbeat.stop(timeout=timeout)
        return unstarted

    def _release(self, timeout: float) -> JobResult | None:
        job = self.handle
        release = ReleaseWrite(job.id, job.claim_token, self.logs.take(), timeout=timeout)
        try:
            result = release.write(self.runtime.backend)
        except Exception as exc:
            logger.warning(
                "could not release job %s during shutdown; the reaper will: %s",
                self.handle.id,
                exc,
                extra={"job_id": self.handle.id, "type": self.handle.type},
            )
            emit(self.runtime, self.handle, "shutdown-released", op="release", error=exc)
            return None
        emit(self.runtime, self.handle, "shutdown-released", op=result.status)
        return result
