"""Time limits of runs (``timeout=`` on ``@durabl.job``, ``process()`` and ``enqueue()``).

A run's limit is the job's own ``timeout``, else its type's. Past it the run's signal
aborts with ``timed-out`` and the attempt fails with failure kind ``timed-out`` (retried
with backoff while attempts remain). In a worker pool a run whose handler has not returned
one heartbeat interval later (its *grace*) is abandoned: :class:`TimeLimits` notices it on
one thread per processor, the run records its attempt and hands its claim back
(:meth:`ManagedRun.abandon`), and the processor starts a worker thread in place of the
stuck one. Python cannot stop a thread: the abandoned one runs on until its handler
returns, and whatever it then does is fenced (its claim is gone).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from durabl.model.abort import TIMED_OUT, JobAborted
from durabl.model.backoff import BackoffPolicy
from durabl.model.clock import Clock
from durabl.model.declared import TypeOptions
from durabl.model.job import Job, JobHandle, LogEntry
from durabl.model.sync import Flag
from durabl.runtime.completer import Completer
from durabl.runtime.ending import ClaimWrite, FailWrite
from durabl.runtime.failures import describe_error
from durabl.runtime.handler import RunSignal
from durabl.runtime.heartbeat import Heartbeat
from durabl.runtime.reports import EventSink, report_timed_out

logger = logging.getLogger(__name__)

#: The longest the watch thread sleeps at once: it notices a clock that jumps (a test's
#: fake clock) within this many seconds.
MAX_WAIT = 1.0


def time_limit_of(job: Job[Any], options: TypeOptions | None) -> float | None:
    """The time limit of a run of ``job``, in seconds: its own, else its type's."""
    if job.timeout is not None:
        return job.timeout
    return None if options is None else options.timeout


def timed_out_reason(limit: float, *, abandoned: bool) -> str:
    """The first line of a timed-out attempt's failure reason."""
    if abandoned:
        return (
            f"timed-out: the run took longer than its time limit of {limit:g} s and its "
            "handler did not stop within the grace; its thread was abandoned"
        )
    return f"timed-out: the run took longer than its time limit of {limit:g} s"


class Watched(Protocol):
    """What :class:`TimeLimits` watches: a run, done once over."""

    @property
    def over(self) -> bool: ...


class TimeLimits:
    """Calls ``on_due(run)`` for each watched run still not over at the monotonic time it
    is watched until (its time limit plus the grace), on one named thread started with the
    first run watched. A run forgets itself when it is over, so only the runs in progress
    are held; there are at most a processor's concurrency and read-ahead of them."""

    def __init__(self, name: str, clock: Clock, on_due: Callable[[Any], None]) -> None:
        self.name = name
        self.clock = clock
        self.on_due = on_due
        self._cond = threading.Condition()
        self._due: dict[Watched, float] = {}
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, run: Watched, until: float) -> None:
        with self._cond:
            if self._closed:
                return
            self._due[run] = until
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify()

    def forget(self, run: Watched) -> None:
        with self._cond:
            self._due.pop(run, None)

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._due:
                    self._cond.wait()
                    continue
                run, until = min(self._due.items(), key=lambda item: item[1])
                wait = until - self.clock.monotonic()
                if wait > 0:
                    self._cond.wait(min(wait, MAX_WAIT))
                    continue
                del self._due[run]
                if run.over:
                    continue
                self._cond.release()
                try:
                    self.on_due(run)
                except Exception:  # never let it end the thread
                    logger.exception("abandoning a run past its time limit failed")
                finally:
                    self._cond.acquire()

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop watching and join the thread (bounded)."""
        with self._cond:
            self._closed = True
            self._due.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class PoolTimeLimits:
    """A worker pool's time limits (one processor's): the watch of its runs, started with
    the first run that has a limit, and what it does with a run still going a grace past
    its limit: the run records its attempt and hands its claim back (through the pool's
    ``completer``), a log line names the job, its handler and the thread left behind,
    and ``on_abandoned(thread)`` lets the pool start another in its place."""

    def __init__(
        self, type: str, handler: object, runtime: LimitRuntime, completer: Completer[Any]
    ) -> None:
        self.type = type
        self.handler = handler
        self.runtime = runtime
        self.completer = completer
        self.on_abandoned: Callable[[threading.Thread | None], None] | None = None
        self._lock = threading.Lock()
        self._watch: TimeLimits | None = None

    def for_run(self, run: TimeLimitedRun) -> TimeLimits | None:
        """What watches ``run``'s time limit: None while no run of the pool has had one
        (a type without limits pays one lookup per run, and no thread)."""
        watch = self._watch
        if watch is not None:
            return watch
        if time_limit_of(run.handle, self.runtime.type_options(self.type)) is None:
            return None
        with self._lock:
            if self._watch is None:
                name = f"durabl-timeouts-{self.type}"
                self._watch = TimeLimits(name, self.runtime.clock, self._abandon)
            return self._watch

    def _abandon(self, run: TimeLimitedRun) -> None:
        if not run.abandon(self.completer):
            return  # it finished meanwhile
        stuck = run.thread
        logger.error(
            "job %s (%s) ran past its time limit of %g s and its handler %s did not stop "
            "within the grace: thread %s is abandoned (it runs on until the handler "
            "returns, and its writes are fenced) and a new worker thread takes its place",
            run.handle.id,
            self.type,
            run.time_limit,
            getattr(self.handler, "__qualname__", repr(self.handler)),
            "?" if stuck is None else stuck.name,
            extra={"job_id": run.handle.id, "type": self.type},
        )
        if self.on_abandoned is not None:
            self.on_abandoned(stuck)

    def close(self, timeout: float | None = 5.0) -> None:
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close(timeout)


class LimitRuntime(EventSink, Protocol):
    """What a time limit needs of a run's queue: its clock, its per-type options and its
    event sinks."""

    clock: Clock


class TimeLimitedRun:
    """The time-limit part of :class:`~durabl.runtime.run.ManagedRun`: arming the limit
    when the handler starts, and abandoning the run past it. The rest of the run (its
    state, its ending write, its reports) is :class:`~durabl.runtime.run.ManagedRun`'s."""

    handle: JobHandle[Any]
    runtime: LimitRuntime
    signal: RunSignal
    heartbeat: Heartbeat
    _lock: threading.Lock
    _state: str
    _error: BaseException | None
    #: Set once the run is over (written, lost, released or refused).
    done: Flag
    #: The run's time limit in seconds (None: none), set when its handler starts.
    time_limit: float | None = None
    #: The run passed its time limit: its attempt fails ``timed-out``.
    _timed_out: bool = False
    #: Past its time limit and grace, the run was left behind by its worker pool.
    abandoned: bool = False
    #: What watches the time limit in a worker pool (None elsewhere).
    _limits: TimeLimits | None = None
    #: The thread that runs the handler (set when a run with a time limit starts).
    thread: threading.Thread | None = None
    _handler_started: float = 0.0

    @property
    def over(self) -> bool:
        """Whether the run is over (its outcome written, lost, released or refused)."""
        return self.done.is_set()

    def _ending(self, error: BaseException | None) -> ClaimWrite:
        raise NotImplementedError

    def _write_here(
        self, error: BaseException | None, duration: float, write: ClaimWrite | None
    ) -> object:
        raise NotImplementedError

    def _over(self) -> None:
        raise NotImplementedError

    def _start_time_limit(self, started: float, limits: TimeLimits | None) -> None:
        """Arm the run's time limit, if it has one: its signal aborts with ``timed-out``
        once passed; in a worker pool (``limits``) the heartbeat renews on through the
        grace, and the pool abandons the run if it is still going at the grace's end."""
        limit = time_limit_of(self.handle, self.runtime.type_options(self.handle.type))
        if limit is None:
            return
        self.time_limit = limit
        self._handler_started = started
        self.thread = threading.current_thread()
        self.signal.set_time_limit(started + limit)
        if limits is not None:
            self._limits = limits
            self.heartbeat.renews_past_time_limit = True
            limits.watch(self, started + limit + self.heartbeat.interval)

    def _forget_time_limit(self) -> None:
        if self._limits is not None:
            self._limits.forget(self)

    def _past_time_limit(self, error: BaseException | None) -> BaseException | None:
        """Decided once the handler is over: whether the run passed its time limit; if so
        its attempt fails ``timed-out``, even when the handler returned (its error then a
        :class:`JobAborted`). ``error``, the handler's, or the one the run ends with."""
        if self.time_limit is None or not self.signal.timed_out:
            return error
        self._timed_out = True
        return error if error is not None else JobAborted(TIMED_OUT)

    def _timed_out_write(self, error: BaseException | None, logs: list[LogEntry]) -> FailWrite:
        """The failed attempt of a run past its time limit, retried with the job's backoff
        while attempts remain; its reason says so first, then the handler's error."""
        job = self.handle
        assert self.time_limit is not None
        reason = timed_out_reason(self.time_limit, abandoned=self.abandoned)
        if error is not None and not self.abandoned:
            reason = f"{reason}\n{describe_error(error)}"
        backoff = BackoffPolicy.for_job(job)
        return FailWrite(job.id, job.claim_token, reason, logs, "timed-out", backoff, job.attempts)

    def _report_timed_out(self, duration: float, *, terminal: bool) -> None:
        assert self.time_limit is not None
        report_timed_out(
            self.runtime,
            self.handle,
            duration,
            limit=self.time_limit,
            abandoned=self.abandoned,
            terminal=terminal,
        )

    def abandon(self, completer: Completer[Any] | None) -> bool:
        """The worker pool's call one heartbeat interval past the run's time limit: leave
        the handler behind, record the attempt failed ``timed-out`` (retried with backoff
        while attempts remain) and hand the claim back, through ``completer`` if given.
        Whatever the handler does once it returns is not written. False when the run
        already finished or is finishing."""
        with self._lock:
            if self._state != "running":
                return False
            self._state = "abandoned"
            self.abandoned = self._timed_out = True
        self.heartbeat.stop(timeout=0)  # a renewal in flight is fenced: harmless
        self._error = error = JobAborted(TIMED_OUT)
        duration = self.runtime.clock.monotonic() - self._handler_started
        write = self._ending(error)
        if completer is not None:
            completer.submit(self, write, duration, lease=self.heartbeat)
        else:
            try:
                self._write_here(error, duration, write)
            finally:
                self._over()
        return True
