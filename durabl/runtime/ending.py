"""The write that ends a claim: what it carries, and the store call that records it.

A run builds exactly one such write for its claim (``ManagedRun._ending``), from how its
handler ended: a :class:`~durabl.stores.base.Completion` (the record
``Backend.complete_many`` takes), a :class:`FailWrite`, a :class:`ReleaseWrite`, a
:class:`SnoozeWrite` or a :class:`CancelWrite`. The run writes it itself with
:func:`write_alone`, or hands it to its processor's completer, which passes the completions
waiting at that moment to one ``complete_many`` call as they are, and writes any other (or
a completion its batch could not carry) with :func:`write_alone`. So what a write carries is
decided in one place, and turned into a store call on its own in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from durabl.model.backoff import DEFAULT_BACKOFF_MAX_DELAY, LATEST_INSTANT, BackoffPolicy
from durabl.model.job import FailureKind, JobResult, LogEntry
from durabl.stores.base import Backend, Completion

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FailWrite:
    """A failed attempt. With a ``backoff`` the job is retried after the wait it gives
    for ``attempt`` (from the store's now when written), unless no attempt remains: then it
    fails with ``kind``. Without one it fails at once with ``kind`` (``fatal``,
    ``invalid-payload``), whatever attempts remain. ``reason`` is the full failure text."""

    job_id: str
    token: str
    reason: str
    logs: Sequence[LogEntry]
    kind: FailureKind
    backoff: BackoffPolicy | None = None
    attempt: int = 0

    def write(self, backend: Backend) -> JobResult:
        if self.backoff is None:
            return backend.fail_fatal(
                self.job_id, self.token, self.reason, logs=self.logs, kind=self.kind
            )
        # The store's now is read here, in the write (tried again while the store is
        # unavailable), so that the wait counts from when the failure is recorded.
        return backend.fail(
            self.job_id,
            self.token,
            self.reason,
            retry_at=self.retry_at(backend.now()),
            logs=self.logs,
            exhausted=self.kind,
        )

    def retry_at(self, now: datetime) -> datetime:
        """When the job is due again, failing from ``now``."""
        assert self.backoff is not None
        try:
            return self.backoff.next_run_at(self.attempt, now)
        except (ArithmeticError, ValueError):  # a backoff no datetime can hold
            return now + timedelta(seconds=DEFAULT_BACKOFF_MAX_DELAY)


@dataclass(frozen=True)
class ReleaseWrite:
    """The claim handed back, its attempt refunded: pending again at its old place in
    line, or at ``run_at`` (a suspended run's wake time); ``timeout`` bounds the write."""

    job_id: str
    token: str
    logs: Sequence[LogEntry]
    run_at: datetime | None = None
    timeout: float | None = None
    #: Called once the release is written (see ``SuspendRun.after_release``); what it
    #: raises is logged: the release itself is recorded.
    then: Callable[[], object] | None = None

    def write(self, backend: Backend) -> JobResult:
        result = backend.release(
            self.job_id, self.token, logs=self.logs, timeout=self.timeout, run_at=self.run_at
        )
        if self.then is not None:
            try:
                self.then()
            except Exception:
                logger.exception("after releasing job %s", self.job_id)
        return result


@dataclass(frozen=True)
class SnoozeWrite:
    """The handler raised :class:`~durabl.Snooze`: the claim handed back, its attempt
    refunded, due ``seconds`` after the store's now when written (read in the write, as a
    retry's wait is), the attempt recorded ``snoozed``."""

    job_id: str
    token: str
    logs: Sequence[LogEntry]
    seconds: float

    def write(self, backend: Backend) -> JobResult:
        return backend.snooze(
            self.job_id, self.token, run_at=self.run_at(backend.now()), logs=self.logs
        )

    def run_at(self, now: datetime) -> datetime:
        """When the job is due again, snoozed at ``now`` (capped where a datetime ends)."""
        try:
            return now + timedelta(seconds=self.seconds)
        except OverflowError:
            return LATEST_INSTANT


@dataclass(frozen=True)
class CancelWrite:
    """A run whose cancellation was requested (``queue.cancel``) and that did not
    complete: the job ends ``cancelled``."""

    job_id: str
    token: str
    logs: Sequence[LogEntry]

    def write(self, backend: Backend) -> JobResult:
        return backend.cancel_run(self.job_id, self.token, logs=self.logs)


#: The one write that ends a claim.
ClaimWrite = Completion | FailWrite | ReleaseWrite | SnoozeWrite | CancelWrite


def write_alone(backend: Backend, write: ClaimWrite) -> JobResult:
    """Record ``write`` on its own: the store call for each kind of write. A completion
    goes to ``complete`` with every field of its record, as ``complete_many`` would take
    it in a batch."""
    if isinstance(write, Completion):
        return backend.complete(write.job_id, write.token, logs=write.logs, result=write.result)
    return write.write(backend)
