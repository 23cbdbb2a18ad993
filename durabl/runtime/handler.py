"""What a run asks of a handler and gives it: a plain function, its payload parsed by the
type's schema, the run's abort signal, :class:`SuspendRun` and :class:`Snooze` to hand
its job back until later, and what each error it raises means for the job
(:func:`failure_kind`).
:class:`~durabl.runtime.run.ManagedRun` calls the handler with these."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from datetime import datetime
from typing import Any

from durabl.model.abort import TIMED_OUT, AbortSignal
from durabl.model.clock import Clock, Seconds, to_seconds
from durabl.model.declared import TypeOptions
from durabl.model.exceptions import FatalJobError
from durabl.model.job import FailureKind, Job
from durabl.model.schema import PayloadValidationError
from durabl.runtime.failures import is_interrupt


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
    once passed, and the run's *time limit* (``timeout=``), which aborts it with
    ``timed-out``; the two are kept apart, so an orchestration's step limits never undo
    the run's. The heartbeat stops renewing as soon as the signal aborts, so a run held
    past its limit by a hung call loses its lease instead of renewing it forever (unless
    a worker pool will abandon it, see :class:`~durabl.runtime.run.ManagedRun`)."""

    def __init__(self, clock: Clock, deadline: float | None = None) -> None:
        super().__init__(clock, deadline)
        self._limit: tuple[float, str] | None = None
        self._time_limit: float | None = None

    def set_limit(self, at: float | None, reason: str = "limit") -> None:
        """Abort with ``reason`` once the monotonic clock reaches ``at`` (None: no limit)."""
        with self._lock:
            self._limit = None if at is None else (at, reason)

    def set_time_limit(self, at: float) -> None:
        """Abort with ``timed-out`` once the monotonic clock reaches ``at``."""
        with self._lock:
            self._time_limit = at

    @property
    def limit(self) -> float | None:
        """The earlier of the limit and the time limit, while not aborted (once it is,
        neither matters: nothing waits for them)."""
        if self._reason is not None:
            return None
        limit, time_limit = self._limit, self._time_limit
        if limit is None:
            return time_limit
        return limit[0] if time_limit is None else min(limit[0], time_limit)

    @property
    def timed_out(self) -> bool:
        """Whether the run was aborted by its time limit."""
        return self._time_limit is not None and self.reason == TIMED_OUT

    def _check_deadline(self) -> None:
        if self._reason is None:
            now = self._clock.monotonic()
            time_limit, limit = self._time_limit, self._limit
            if time_limit is not None and now >= time_limit:
                self.abort(TIMED_OUT)
            elif limit is not None and now >= limit[0]:
                self.abort(limit[1])
        super()._check_deadline()


class SuspendRun(Exception):
    """Raised by a handler to end its run by handing the job back to pending until
    ``run_at``, without using an attempt (the orchestrator's durable sleep). The run's
    outcome is ``released``; it is not reported as an error."""

    def __init__(
        self,
        run_at: datetime,
        reason: str = "suspended",
        *,
        after_release: Callable[[], object] | None = None,
    ) -> None:
        super().__init__(reason)
        self.run_at = run_at
        #: Called once the job is written back to pending (a signal wait checks whether
        #: its signal arrived while the job was still running, and wakes it if so).
        self.after_release = after_release


class Snooze(Exception):
    """Raise from a handler to run the job again ``seconds`` (a number or a
    ``timedelta``) from now: it goes back to pending, its attempt is **not** used (so
    ``max_attempts`` is not consumed) and its attempt history records ``snoozed``.

    A plain ``Exception`` subclass, as :class:`~durabl.FatalJobError` is: handler code
    raises it. A negative, infinite or non-numeric ``seconds`` is a ``ValueError`` here,
    where it is raised (the run then fails as with any other error)."""

    def __init__(self, seconds: Seconds) -> None:
        self.seconds = to_seconds(seconds, "Snooze seconds")
        super().__init__(f"snoozed for {self.seconds:g} s")


#: What a handler raises to hand its job back without failing: the run's outcome is not an
#: error (:class:`SuspendRun`, :class:`Snooze`).
HANDED_BACK: tuple[type[Exception], ...] = (SuspendRun, Snooze)


class InvalidPayload(PayloadValidationError):
    """The stored data of a claimed job does not match its type's schema: the run ends
    at once, without its handler, failed ``invalid-payload`` (an inline run raises it)."""

    def __init__(self, error: PayloadValidationError) -> None:
        super().__init__(error.type, error.errors)


def parse_payload(options: TypeOptions | None, job: Job[Any]) -> Job[Any]:
    """``job`` with its data parsed by the schema of its type's ``options`` (``job``
    itself without one); :class:`InvalidPayload` when the stored data does not validate."""
    if options is None or options.schema is None:
        return job
    try:
        parsed = options.schema.parse(job.type, job.data)
    except PayloadValidationError as exc:
        raise InvalidPayload(exc) from None
    job = copy.copy(job)
    object.__setattr__(job, "data", parsed)  # a copy of a frozen snapshot, data swapped
    return job


def failure_kind(
    error: BaseException, fatal_errors: tuple[type[BaseException], ...] = ()
) -> FailureKind:
    """The failure kind a terminal failure with a handler's ``error`` is recorded as:
    ``invalid-payload``, ``fatal`` (:class:`~durabl.FatalJobError`, or one of the
    handler's own ``fatal_errors``; both fail the job at once), ``interrupted`` (a
    ``BaseException``), else ``retries-exhausted``."""
    if isinstance(error, InvalidPayload):
        return "invalid-payload"
    if isinstance(error, (FatalJobError, *fatal_errors)):
        return "fatal"
    return "interrupted" if is_interrupt(error) else "retries-exhausted"
