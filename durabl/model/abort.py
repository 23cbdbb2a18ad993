"""The abort signal a handler sees as ``ctx.signal``, and the handler's context."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import DurablError
from durabl.model.job import Job, LogEntry, clip_text
from durabl.model.options import MAX_LOG_ENTRIES, MAX_LOG_MESSAGE_BYTES
from durabl.model.sync import Flag

LEASE_LOST = "lease-lost"
LEASE_UNCONFIRMED = "lease-unconfirmed"
SHUTDOWN = "shutdown"
#: The run passed its time limit (``timeout=``): its attempt fails with failure kind
#: ``timed-out``.
TIMED_OUT = "timed-out"


class JobAborted(DurablError):
    """Raised by :meth:`AbortSignal.raise_if_aborted` once the run has been aborted."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"job run aborted: {reason}")


class AbortSignal:
    """Set when the run must stop: its lease was lost or went unconfirmed past the local
    deadline, or the process is shutting down. Handlers poll ``aborted`` or ``wait()``.

    The lease deadline is checked on every read, so a renewal that hangs cannot keep a run
    alive past it.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, deadline: float | None = None) -> None:
        self._event = Flag()
        self._lock = threading.Lock()
        self._clock = clock
        self._deadline = deadline
        self._reason: str | None = None

    def abort(self, reason: str) -> bool:
        """Abort once; False if it was already aborted (the first reason stays)."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
        self._event.set()
        return True

    def extend(self, deadline: float) -> None:
        """Move the lease deadline (monotonic seconds) after a confirmed renewal."""
        with self._lock:
            if self._deadline is None or deadline > self._deadline:
                self._deadline = deadline

    @property
    def deadline(self) -> float | None:
        return self._deadline

    @property
    def limit(self) -> float | None:
        """A monotonic time past which the run aborts besides its lease deadline (a step
        timeout, a maximum duration); None here, set by a managed run's signal."""
        return None

    def _check_deadline(self) -> None:
        deadline = self._deadline
        if deadline is not None and self._reason is None and self._clock.monotonic() >= deadline:
            self.abort(LEASE_UNCONFIRMED)

    @property
    def aborted(self) -> bool:
        self._check_deadline()
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        self._check_deadline()
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block until aborted or ``timeout`` (real) seconds pass; True when aborted.

        Use it instead of ``time.sleep`` in handlers: shutdown and lease loss wake it.
        """
        end = None if timeout is None else time.monotonic() + timeout
        while not self.aborted:
            step = 1.0  # wake now and then so a deadline reached on any clock is seen
            if end is not None:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                step = min(step, remaining)
            for until in (self._deadline, self.limit):  # wake to notice either one pass
                if until is not None:
                    step = min(step, max(until - self._clock.monotonic(), 0.001))
            if self._event.wait(step):
                return True
        return True

    def raise_if_aborted(self) -> None:
        if self.aborted:
            raise JobAborted(self._reason or "aborted")


class LogBuffer:
    """The lines a handler logged and the store has not got yet. Its run hands them over
    with the next heartbeat or the terminal write; the newest entries are kept and long
    lines are clipped."""

    __slots__ = ("_lock", "_logs", "now")

    def __init__(self, now: Callable[[], datetime]) -> None:
        self.now = now
        self._logs: list[LogEntry] = []
        self._lock = threading.Lock()

    def append(self, message: str) -> None:
        entry = LogEntry(self.now(), clip_text(str(message), MAX_LOG_MESSAGE_BYTES))
        with self._lock:
            self._logs.append(entry)
            if len(self._logs) > MAX_LOG_ENTRIES:
                del self._logs[: len(self._logs) - MAX_LOG_ENTRIES]

    def take(self) -> list[LogEntry]:
        """Hand over (and forget) the lines not yet stored."""
        with self._lock:
            logs, self._logs = self._logs, []
        return logs

    def requeue(self, logs: list[LogEntry]) -> None:
        """Put back lines whose write failed, ahead of newer ones."""
        with self._lock:
            self._logs[:0] = logs
            if len(self._logs) > MAX_LOG_ENTRIES:
                del self._logs[: len(self._logs) - MAX_LOG_ENTRIES]


class JobContext:
    """What a handler gets besides the job: ``signal`` and ``log(message)``. Its lines go
    to ``logs``, a :class:`LogBuffer` its run (or test harness) keeps."""

    __slots__ = ("_logs", "signal")

    def __init__(self, signal: AbortSignal, logs: LogBuffer) -> None:
        self.signal = signal
        self._logs = logs

    def __repr__(self) -> str:
        return f"JobContext(aborted={self.signal.aborted})"

    def log(self, message: str) -> None:
        """Record a line on the job. Lines are stored with the next heartbeat or the
        terminal write; the newest entries are kept and long lines are clipped."""
        self._logs.append(message)


#: A job handler: ``handler(job, ctx)``; what it returns is the job's result.
Handler = Callable[[Job[Any], JobContext], object]
