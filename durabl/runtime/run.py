"""Managed execution of one claimed job: heartbeat, handler, outcome, terminal write.

The handler's return completes the job; an ``Exception`` retries it (or fails it at
``max_attempts``); :class:`FatalJobError` fails it at once. A run whose lease was lost, or
went unconfirmed past its local deadline, writes nothing: another worker may own the job.
"""

from __future__ import annotations

import copy
import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from durabl.model.abort import (
    LEASE_LOST,
    LEASE_UNCONFIRMED,
    SHUTDOWN,
    AbortSignal,
    Handler,
    JobContext,
    LogBuffer,
)
from durabl.model.clock import Clock
from durabl.model.declared import TypeOptions
from durabl.model.exceptions import FatalJobError
from durabl.model.job import (
    CANCELLED,
    DEAD_LETTER_KINDS,
    FailureKind,
    Job,
    JobEvent,
    JobHandle,
    JobResult,
    JournalAppendResult,
    LogEntry,
)
from durabl.model.options import DEFAULT_BACKOFF_MAX_DELAY, BackoffPolicy
from durabl.model.payload import check_result
from durabl.model.schema import PayloadValidationError
from durabl.model.sync import Flag
from durabl.runtime.completer import Completer, Persist
from durabl.runtime.failures import describe_error as describe_error  # noqa: PLC0414
from durabl.runtime.failures import error_text as error_text  # noqa: PLC0414
from durabl.runtime.failures import is_interrupt as is_interrupt  # noqa: PLC0414
from durabl.runtime.heartbeat import Heartbeat, HeartbeatThread
from durabl.runtime.hooks import RunHooks
from durabl.runtime.outages import log_failure
from durabl.runtime.registry import RunRegistry
from durabl.stores.base import Backend, Completion

logger = logging.getLogger(__name__)


def check_plain_function(function: object, what: str, runs: str) -> None:
    """Refuse what no worker thread can call: ``function`` not callable, or async.
    ``what`` names it in the message (``handler for 'email'``); ``runs``: what durabl
    calls such functions (``handlers``)."""
    if not callable(function):
        raise TypeError(f"{what} must be callable, got {function!r}")
    if inspect.iscoroutinefunction(function):
        raise TypeError(
            f"{what} is async; durabl runs {runs} in worker threads: write it as a plain function"
        )


class RunSignal(AbortSignal):
    """The abort signal of a managed run: the lease deadline, plus an optional *limit*
    (a step timeout or a run's maximum duration) that aborts the run with its own reason
    once passed. The heartbeat stops renewing as soon as the signal aborts, so a run held
    past its limit by a hung call loses its lease instead of renewing it forever."""

    def __init__(self, clock: Clock, deadline: float | None = None) -> None:
        super().__init__(clock, deadline)
        self._limit: tuple[float, str] | None = None

    def set_limit(self, at: float | None, reason: str = "limit") -> None:
        """Abort with ``reason`` once the monotonic clock reaches ``at`` (None: no limit)."""
        with self._lock:
            self._limit = None if at is None else (at, reason)

    @property
    def limit(self) -> float | None:
        limit = self._limit
        return None if limit is None else limit[0]

    def _check_deadline(self) -> None:
        limit = self._limit
        if limit is not None and self._reason is None and self._clock.monotonic() >= limit[0]:
            self.abort(limit[1])
        super()._check_deadline()


class SuspendRun(Exception):
    """Raised by a handler to end its run by handing the job back to pending until
    ``run_at``, without using an attempt (the orchestrator's durable sleep). The run's
    outcome is ``released``; it is not reported as an error."""

    def __init__(self, run_at: datetime, reason: str = "suspended") -> None:
        super().__init__(reason)
        self.run_at = run_at


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


class Runtime(Protocol):
    """What a run needs from its queue."""

    backend: Backend
    clock: Clock
    visibility_timeout: float
    retention: float | None

    #: Whether any event sink takes events of this kind (else none need be built).
    def listens(self, kind: str) -> bool: ...

    #: The live runs: each run tracks itself from its claim until it is over.
    runs: RunRegistry[ManagedRun]
    #: What wraps every run (``queue.add_run_hook``).
    run_hooks: RunHooks

    def emit(self, event: JobEvent) -> None: ...

    def type_options(self, type: str) -> TypeOptions | None:
        """The type's schema, dead-letter hook and defaults (None: none declared)."""
        ...


class InvalidPayload(PayloadValidationError):
    """The stored data of a claimed job does not match its type's schema: the run ends
    at once, without its handler, failed ``invalid-payload`` (an inline run raises it)."""

    def __init__(self, error: PayloadValidationError) -> None:
        super().__init__(error.type, error.errors)


def parse_payload(runtime: Runtime, job: Job[Any]) -> Job[Any]:
    """``job`` with its data parsed by its type's schema (``job`` itself without one);
    :class:`InvalidPayload` when the stored data does not validate."""
    options = runtime.type_options(job.type)
    if options is None or options.schema is None:
        return job
    try:
        parsed = options.schema.parse(job.type, job.data)
    except PayloadValidationError as exc:
        raise InvalidPayload(exc) from None
    job = copy.copy(job)
    object.__setattr__(job, "data", parsed)  # a copy of a frozen snapshot, data swapped
    return job


def emit_claimed(runtime: Runtime, handle: JobHandle[Any]) -> None:
    """The ``claimed`` event of ``handle``, built only when some sink takes it."""
    if runtime.listens("claimed"):
        runtime.emit(JobEvent("claimed", handle.type, handle.id, attempt=handle.attempts))


def dead_letter(
    runtime: Runtime,
    type: str,
    job_id: str,
    kind: FailureKind | None,
    job: Job[Any] | None = None,
) -> None:
    """A job of ``type`` was just recorded failed with ``kind`` by this process: when the
    kind dead-letters, send the sink a ``dead-lettered`` event and call the type's
    ``on_dead_letter(job)`` with the stored job (``job`` when the caller has just read
    it, else read here). Never raises: a failing hook is logged."""
    if kind not in DEAD_LETTER_KINDS:
        return
    extra = {"job_id": job_id, "type": type}
    if runtime.listens("dead-lettered"):
        runtime.emit(JobEvent("dead-lettered", type, job_id, extra={"failure_kind": kind}))
    options = runtime.type_options(type)
    hook = None if options is None else options.on_dead_letter
    if hook is None:
        return
    try:
        job = job if job is not None else runtime.backend.get_job(job_id)
        if job is not None:
            hook(job)
    except Exception:
        logger.exception("on_dead_letter for job %s (%s) raised", job_id, type, extra=extra)


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: the handler's error (if any) and what the store recorded."""

    error: BaseException | None
    result: JobResult | None
    #: "written" (the store has the outcome), "lease-lost" (write suppressed),
    #: "released" (shutdown took the claim back), "write-failed", or "handed-over"
    #: (a completer writes the outcome; the run's ``done`` event is set once it has).
    disposition: str

    @property
    def status(self) -> str | None:
        return self.result.status if self.result else None


def _once(write: Callable[[], JobResult]) -> JobResult:
    """An outcome written in the calling thread: one try."""
    return write()


def release_unrun(handle: JobHandle[Any]) -> JobResult:
    """Hand back a claim that will not run here (the queue began shutting down between
    the claim and its run): no attempt used. The one fenced write made for a claim no
    :class:`ManagedRun` owns, kept here with the run's own."""
    return handle.release(timeout=1.0)


class ManagedRun:
    """One claim, run once: the one owner of a claim's life.

    Created from a claim, the run tracks itself in its queue's registry; it starts and
    stops its heartbeat, runs the handler inside the queue's run hooks, writes its
    outcome, or hands the claim back on shutdown, reports the outcome as an event, and
    untracks itself once over. In a worker pool every outcome goes through the
    processor's completer: it writes completions in batches and calls
    :meth:`completion_written` back, and calls :meth:`write_outcome` for any other
    outcome; elsewhere the run writes in the calling thread. Thread-safe against
    :meth:`abort_and_release` from shutdown.
    """

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
        # An outcome handed to the completer to write: (error, duration, lease lost).
        self._handed_over: tuple[BaseException | None, float, bool] | None = None
        #: What the handler returned, as the job keeps it (set once it returned).
        self._result: Any = None
        self.done = Flag()
        # Tracked from the claim on, so shutdown sees (and fences) runs not yet started.
        runtime.runs.track(self)

    @property
    def job_id(self) -> str:
        return self.handle.id

    def _emit(self, kind: str, **fields: Any) -> None:
        if not self.runtime.listens(kind):
            return
        self.runtime.emit(JobEvent(kind, self.handle.type, self.handle.id, **fields))

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
        self._emit("lease-lost", op=op)

    @property
    def started(self) -> bool:
        return self._state != "new"

    def execute(
        self,
        heartbeat_host: HeartbeatThread | None = None,
        completer: Completer[ManagedRun] | None = None,
    ) -> RunOutcome:
        """Run the handler and record its outcome. Never raises the handler's error.

        A run that shutdown released before it started does nothing. ``heartbeat_host``
        is the calling worker's reusable heartbeat thread, if it has one. With a
        ``completer``, every outcome is handed to it (outcome ``handed-over``): it writes
        completions in batches and has the run write (or report) any other outcome on
        its thread; the run stays tracked until then. Without one, the outcome is written
        in the calling thread."""
        with self._lock:
            if self._state != "new":
                self._over()
                return RunOutcome(None, None, "released")
            self._state = "running"
        started = self.runtime.clock.monotonic()
        if started - self.started_at >= self.heartbeat.interval and not self._renew_first():
            return self._end(None, 0.0, completer)  # lease-lost: the handler never runs
        if self.reserved:
            self._mark_started(completer)
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
            if outcome is None or outcome.disposition != "handed-over":
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
        job = parse_payload(self.runtime, self.handle.as_job() if job is None else job)
        if isinstance(self.handler, ManagedHandler):
            return self.handler.run_managed(self)
        return self.handler(job, self.ctx)

    def _over(self) -> None:
        """The run is over (written, lost, released or refused): nobody waits for it."""
        self.runtime.runs.untrack(self)
        self.done.set()

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
                return RunOutcome(error, None, "released")
            self._state = "finishing"
        # Decided here, once the heartbeat has stopped: nothing aborts the signal later.
        lost = self.signal.aborted and self.signal.reason in (LEASE_LOST, LEASE_UNCONFIRMED)
        handed_over = False
        try:
            if completer is None:
                return self._record(error, duration, lost)
            # The completer renews the lease until the outcome is written (none when lost).
            lease = None if lost else self.heartbeat
            if error is None and not lost:
                job = self.handle
                completion = Completion(job.id, job.claim_token, self.logs.take(), self._result)
                completer.submit(self, completion, duration, lease=lease)
            else:
                self._handed_over = (error, duration, lost)
                completer.submit_outcome(self, lease=lease)
            handed_over = True
            if isinstance(error, SuspendRun):
                error = None  # a suspension is how the run ended, not a failure
            return RunOutcome(error, None, "handed-over")
        finally:
            if not handed_over:
                with self._lock:
                    self._state = "done"

    def _record(
        self,
        error: BaseException | None,
        duration: float,
        lost: bool,
        persist: Persist | None = None,
    ) -> RunOutcome:
        """Write the outcome (or, when the lease was lost, only report it) and report it;
        through ``persist`` (the completer's retries) when given."""
        if lost:
            self._lease_lost()
            return RunOutcome(error, None, "lease-lost")
        logs = self.logs.take()  # once: a write tried again carries the same lines
        try:
            result = (persist or _once)(lambda: self._write(error, logs))
        except Exception as exc:
            self._write_failed(exc)
            return RunOutcome(error, None, "write-failed")
        self._report(error, result, duration)
        if error is not None and result.status == "failed-terminal":
            dead_letter(self.runtime, self.handle.type, self.handle.id, self._kind(error))
        if isinstance(error, SuspendRun):
            error = None  # a suspension is how the run ended, not a failure
        if result.status in ("lease-lost", "already-terminal", "not-found"):
            return RunOutcome(error, result, "lease-lost")
        return RunOutcome(error, result, "written")

    def write_outcome(self, persist: Persist) -> None:
        """The completer's call for an outcome handed over that is not a plain completion
        (a failure, a suspension, a lost lease): write it through ``persist`` (tried again
        while the store is unavailable) and report it, one write on its own, then let
        shutdown and ``done`` waiters know the run is over."""
        try:
            handed_over, self._handed_over = self._handed_over, None
            if handed_over is not None:
                self._record(*handed_over, persist=persist)
        finally:
            with self._lock:
                self._state = "done"
            self._over()

    def completion_written(self, result: JobResult | Exception, duration: float) -> None:
        """The completer wrote (or failed to write) this run's completion: report it, and
        let shutdown and ``done`` waiters know the run is over."""
        try:
            if isinstance(result, Exception):
                self._write_failed(result)
            else:
                self._report(None, result, duration)
        finally:
            with self._lock:
                self._state = "done"
            self._over()

    def _write_failed(self, exc: BaseException) -> None:
        extra = {"job_id": self.handle.id, "type": self.handle.type}
        message = "could not record the outcome of job %s; the reaper will recover it"
        log_failure(logger, exc, message, self.handle.id, extra=extra)

    def _write(self, error: BaseException | None, logs: list[LogEntry]) -> JobResult:
        backend = self.runtime.backend
        job = self.handle
        if error is None:
            return backend.complete(job.id, job.claim_token, logs=logs, result=self._result)
        if self.signal.aborted and self.signal.reason == CANCELLED:
            return backend.cancel_run(job.id, job.claim_token, logs=logs)
        if isinstance(error, SuspendRun):
            return backend.release(job.id, job.claim_token, logs=logs, run_at=error.run_at)
        if isinstance(error, InvalidPayload):
            return backend.fail_fatal(
                job.id, job.claim_token, str(error), logs=logs, kind="invalid-payload"
            )
        reason = describe_error(error)
        if self._is_fatal(error):
            return backend.fail_fatal(job.id, job.claim_token, reason, logs=logs)
        now = backend.now()
        try:
            retry_at = BackoffPolicy.for_job(job).next_run_at(job.attempts, now)
        except (ArithmeticError, ValueError):  # a backoff no datetime can hold
            retry_at = now + timedelta(seconds=DEFAULT_BACKOFF_MAX_DELAY)
        exhausted: FailureKind = "interrupted" if is_interrupt(error) else "retries-exhausted"
        return backend.fail(
            job.id, job.claim_token, reason, retry_at=retry_at, logs=logs, exhausted=exhausted
        )

    def _kind(self, error: BaseException) -> FailureKind:
        """The failure kind a terminal failure with ``error`` is recorded as."""
        if isinstance(error, InvalidPayload):
            return "invalid-payload"
        if self._is_fatal(error):
            return "fatal"
        return "interrupted" if is_interrupt(error) else "retries-exhausted"

    def _is_fatal(self, error: BaseException) -> bool:
        handler = self.handler
        if isinstance(error, InvalidPayload):
            return True
        fatal = handler.fatal_errors if isinstance(handler, ManagedHandler) else ()
        return isinstance(error, (FatalJobError, *fatal))

    def _report(self, error: BaseException | None, result: JobResult, duration: float) -> None:
        status = result.status
        extra = {"job_id": self.handle.id, "type": self.handle.type}
        if status in ("lease-lost", "already-terminal", "not-found"):
            op = "complete" if error is None else "fail"
            if isinstance(error, SuspendRun):
                op = "release"
            self._emit("lease-lost", op=op)
            logger.warning("job %s: outcome not recorded (%s)", self.handle.id, status, extra=extra)
        elif status == "completed":
            self._emit("completed", duration=duration, attempt=self.handle.attempts)
        elif status == "superseded":
            self._emit("superseded", duration=duration)
        elif status == "cancelled":
            self._emit("cancelled", duration=duration, attempt=self.handle.attempts)
            logger.info("job %s cancelled", self.handle.id, extra=extra)
        elif isinstance(error, SuspendRun):
            self._emit("suspended", duration=duration, extra={"run_at": error.run_at})
        elif error is not None and self._is_fatal(error):
            self._emit("fail-fatal", duration=duration, terminal=True, error=error)
            logger.error(
                "job %s failed fatally: %s", self.handle.id, error_text(error), extra=extra
            )
        else:
            terminal = status == "failed-terminal"
            self._emit(
                "failed",
                duration=duration,
                terminal=terminal,
                error=error,
                attempt=self.handle.attempts,
            )
            log = logger.error if terminal else logger.warning
            log(
                "job %s attempt %d/%d failed%s: %s",
                self.handle.id,
                self.handle.attempts,
                self.handle.max_attempts,
                "" if not terminal else " for the last time",
                "no error" if error is None else f"{type(error).__name__}: {error_text(error)}",
                extra=extra,
            )

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
        try:
            result = self.runtime.backend.release(
                self.handle.id,
                self.handle.claim_token,
                logs=self.logs.take(),
                timeout=timeout,
            )
        except Exception as exc:
            logger.warning(
                "could not release job %s during shutdown; the reaper will: %s",
                self.handle.id,
                exc,
                extra={"job_id": self.handle.id, "type": self.handle.type},
            )
            self._emit("shutdown-released", op="release", error=exc)
            return None
        self._emit("shutdown-released", op=result.status)
        return result
