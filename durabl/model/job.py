"""The job record: statuses, the stored job, a claimed job's handle and the writes fenced
on its claim token, lifecycle results. Pure: no I/O.

A job's attempt history is :mod:`durabl.model.attempts`; what a queue reports (stats,
sweeps, health, events) is :mod:`durabl.model.reports`."""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, Protocol, TypeVar, get_args

from durabl.model import backoff as _backoff
from durabl.model.attempts import Attempt, AttemptOutcome, attempt_error
from durabl.model.backoff import BackoffPolicy
from durabl.model.payload import check_result
from durabl.model.waiting import suspension_of

T = TypeVar("T")

BackoffKind = _backoff.BackoffKind

JobStatus = Literal["pending", "active", "completed", "failed", "superseded", "cancelled"]
TerminalStatus = Literal["completed", "failed", "superseded", "cancelled"]
FailureKind = Literal[
    "retries-exhausted", "fatal", "stalled", "interrupted", "invalid-payload", "timed-out"
]
DedupeScope = Literal["pending+active", "pending"]

STATUSES: tuple[JobStatus, ...] = get_args(JobStatus)
TERMINAL_STATUSES: tuple[TerminalStatus, ...] = get_args(TerminalStatus)
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)
#: The failure kinds that dead-letter a job (``on_dead_letter``; ``interrupted`` does not:
#: the process was stopped, the job did not fail on its own).
DEAD_LETTER_KINDS: tuple[FailureKind, ...] = (
    "retries-exhausted",
    "fatal",
    "stalled",
    "invalid-payload",
    "timed-out",
)
DEDUPE_SCOPES: tuple[DedupeScope, ...] = get_args(DedupeScope)

ResultStatus = Literal[
    "completed",
    "cancelled",
    "retry-scheduled",
    "failed-terminal",
    "superseded",
    "released",
    "already-terminal",
    "lease-lost",
    "not-found",
]


@dataclass(frozen=True)
class LogEntry:
    """One line a handler logged, with the instant it was logged."""

    at: datetime
    message: str


JournalRecord = Mapping[str, Any]
"""One entry of an orchestration journal: a dict of portable values (see
:mod:`durabl.model.payload`). Stores keep entries opaque and in order; :mod:`durabl.orchestrator`
gives them meaning."""


@dataclass(frozen=True, kw_only=True)
class Job(Generic[T]):
    """A snapshot of one stored job."""

    id: str
    type: str
    data: T
    status: JobStatus
    priority: int = 0
    run_at: datetime
    attempts: int = 0
    max_attempts: int = 3
    dedupe_key: str | None = None
    dedupe_scope: DedupeScope | None = None
    #: Flow control (docs/flow-control.md): at most ``concurrency_limit`` jobs holding
    #: ``concurrency_key`` are active at once; both None for a job without a key.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    created_at: datetime
    updated_at: datetime
    #: When the job reached its terminal status (None while pending or active; a retry
    #: clears it).
    finished_at: datetime | None = None
    fail_reason: str | None = None
    failure_kind: FailureKind | None = None
    logs: tuple[LogEntry, ...] = ()
    backoff: BackoffKind = "exponential"
    backoff_delay: float = 1.0
    backoff_max_delay: float = 300.0
    #: The orchestration journal stored on the job, in append order (empty for plain jobs).
    journal: tuple[JournalRecord, ...] = field(default=(), repr=False)
    #: How each claim ended, oldest first (the last ATTEMPTS_KEPT).
    attempt_history: tuple[Attempt, ...] = field(default=(), repr=False)
    #: While active: the claiming process's lease owner, its last heartbeat (the claim
    #: counts as one), and when its lease runs out: the last heartbeat plus the queue's
    #: visibility timeout (filled in by the :class:`durabl.JobQueue` that read the job).
    worker: str | None = None
    heartbeat_at: datetime | None = None
    lease_expires_at: datetime | None = None
    #: What the handler returned (portable values only), once the job completed.
    result: Any = field(default=None, repr=False)
    #: The propagation headers stored at enqueue (W3C ``traceparent``/``tracestate``, see
    #: :mod:`durabl.tracing`); None when the job was enqueued without one.
    trace_context: Mapping[str, str] | None = field(default=None, repr=False)
    #: The job's own time limit in seconds (``enqueue(timeout=)``), over its type's; None:
    #: the type's, if it has one (see docs/concepts.md, Time limits).
    timeout: float | None = None
    #: The orchestration that started this job (``octx.start_children``), else None; and
    #: the step and place among that step's children it was started as (``"fan-out#3"``).
    parent_id: str | None = None
    parent_step: str | None = None

    @property
    def waiting_for(self) -> str | None:
        """What a suspended orchestration waits for (``"until 2026-12-24T00:00:00Z"`` for
        a durable sleep, ``"signal:approve"`` for ``wait_for_signal``), else None. Read
        from the journal the job carries: nothing more is stored or fetched for it."""
        return suspension_of(self.status, self.run_at, self.journal, self.updated_at)


@dataclass(frozen=True)
class JobResult:
    """What a lifecycle write did: ``.status``, and ``.terminal_status`` for already-terminal."""

    status: ResultStatus
    terminal_status: TerminalStatus | None = None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.status == other
        if isinstance(other, JobResult):
            return (self.status, self.terminal_status) == (other.status, other.terminal_status)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.status, self.terminal_status))


# Per-operation names for readers of the API; all are JobResult.
CompleteJobResult = JobResult
FailJobResult = JobResult
FailFatalJobResult = JobResult
ReleaseJobResult = JobResult
#: ``cancel-requested``: renewed, and :meth:`durabl.JobQueue.cancel` asked the run to stop.
HeartbeatResult = Literal["applied", "lease-lost", "cancel-requested"]
#: What :meth:`durabl.stores.base.Backend.cancel` did: a pending job ``cancelled`` at
#: once, an active one's cancellation ``requested``, or nothing (``not-cancellable``: the
#: job is terminal, missing, or its cancellation was already requested).
CancelOutcome = Literal["cancelled", "requested", "not-cancellable"]
#: The reason a cancelled job keeps, and its run's abort reason.
CANCELLED = "cancelled"
JournalAppendResult = Literal["applied", "lease-lost"]


#: The most of a failure reason any store keeps, in bytes of UTF-8.
MAX_FAIL_REASON_BYTES = 16 * 1024


def clip_text(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, marked when cut."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= max_bytes:
        return text
    marker = "… [truncated]"
    keep = max(max_bytes - len(marker.encode("utf-8")), 0)
    return raw[:keep].decode("utf-8", "ignore") + marker


def clip_reason(reason: str) -> str:
    """A failure reason as every store keeps it: at most MAX_FAIL_REASON_BYTES of UTF-8."""
    return clip_text(reason, MAX_FAIL_REASON_BYTES)


@dataclass(frozen=True, init=False)
class Completion:
    """One finished run to record as completed: what ``complete_many`` takes."""

    job_id: str
    token: str
    logs: Sequence[LogEntry] = ()
    #: The handler's return value (portable, checked), kept as :attr:`Job.result`.
    result: Any = None

    def __init__(
        self, job_id: str, token: str, logs: Sequence[LogEntry] = (), result: Any = None
    ) -> None:
        # Made for every completed run: one write of the instance's dict, not the frozen
        # dataclass's object.__setattr__ per field.
        self.__dict__.update(job_id=job_id, token=token, logs=logs, result=result)


@dataclass(frozen=True)
class Failure:
    """A failed attempt, as :meth:`FencedWrites.write_failure` records it. ``reason`` is
    already clipped to the stored length. ``retry_at`` None: fail at once (``fail_fatal``);
    else retry then, unless no attempt remains: failed with failure kind ``kind``."""

    reason: str
    retry_at: datetime | None
    kind: FailureKind

    @property
    def op(self) -> str:
        """The operation's name in receipts, retries and errors."""
        return "fail" if self.retry_at is not None else "fail-fatal"

    @property
    def error(self) -> str | None:
        """The one-line summary the attempt's history entry keeps."""
        return attempt_error(self.reason)

    @property
    def terminal_outcome(self) -> AttemptOutcome:
        """The attempt's outcome when this failure ends the job."""
        return "invalid-payload" if str(self.kind) == "invalid-payload" else "failed"


@dataclass(frozen=True)
class Release:
    """A run handed back, as :meth:`FencedWrites.write_release` records it: pending again
    at its old place in line, or at ``run_at``; ``timeout`` bounds the whole write.
    ``outcome`` is what the attempt's history entry says: ``released``, or ``snoozed``
    when the handler asked to run again later (``raise durabl.Snooze``)."""

    run_at: datetime | None = None
    timeout: float | None = None
    outcome: AttemptOutcome = "released"


class FencedWrites(Protocol):
    """What a :class:`JobHandle` calls: the clock read and the writes fenced on its claim
    token. Every store (:class:`durabl.stores.base.Backend`) provides them; the model names
    only these, so it imports no store.

    The public writes (``complete``, ``fail``, ``fail_fatal``, ``release``) are written here
    once, for every store that subclasses :class:`durabl.stores.engine.StoreBase`: each
    checks its arguments into a record and hands it to the store's own atomic write
    (``write_completions``, ``write_failure``, ``write_release``)."""

    def now(self) -> datetime:
        """The store's notion of the current instant (server time where it has one)."""

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> HeartbeatResult:
        """Renew the lease (and store ``logs``) while ``token`` holds the claim."""

    def complete(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = (), result: Any = None
    ) -> JobResult:
        """Record the run as completed, keeping ``result`` (portable, already checked)."""
        return self.write_completions("complete", [Completion(job_id, token, logs, result)])[0]

    def fail(
        self,
        job_id: str,
        token: str,
        reason: str,
        *,
        retry_at: datetime,
        logs: Sequence[LogEntry] = (),
        exhausted: FailureKind = "retries-exhausted",
    ) -> JobResult:
        """Retry at ``retry_at`` when attempts remain, else fail with failure kind
        ``exhausted`` (``interrupted`` when a ``BaseException`` ended the last attempt).
        ``superseded`` when a pending follower already holds the key."""
        failure = Failure(clip_reason(reason), retry_at, exhausted)
        return self.write_failure(job_id, token, failure, logs)

    def fail_fatal(
        self,
        job_id: str,
        token: str,
        reason: str,
        *,
        logs: Sequence[LogEntry] = (),
        kind: FailureKind = "fatal",
    ) -> JobResult:
        """Fail at once with failure kind ``kind`` (``fatal``, or ``invalid-payload`` when
        the stored data no longer matches the type's schema), whatever attempts remain."""
        return self.write_failure(job_id, token, Failure(clip_reason(reason), None, kind), logs)

    def release(
        self,
        job_id: str,
        token: str,
        *,
        logs: Sequence[LogEntry] = (),
        timeout: float | None = None,
        run_at: datetime | None = None,
    ) -> JobResult:
        """Back to pending, keeping its ``run_at`` (its place in line) unless ``run_at`` is
        given (a durable sleep hands the job back until its wake time), refunding the
        attempt; ``superseded`` when a follower holds the pending slot. ``timeout`` bounds
        the whole write."""
        return self.write_release(job_id, token, Release(run_at, timeout), logs)

    def snooze(
        self, job_id: str, token: str, *, run_at: datetime, logs: Sequence[LogEntry] = ()
    ) -> JobResult:
        """As :meth:`release` to ``run_at`` (the attempt refunded), the attempt recorded
        as ``snoozed``: the handler raised :class:`durabl.Snooze`."""
        return self.write_release(job_id, token, Release(run_at, None, "snoozed"), logs)

    def append_journal(
        self, job_id: str, token: str, records: Sequence[JournalRecord], *, position: int
    ) -> JournalAppendResult:
        """Append ``records`` (portable dicts, already validated) to the job's journal, in
        order, when ``token`` holds the claim and the journal holds exactly ``position``
        records. A repeat of an append that already applied under the same claim reports
        ``applied`` without appending twice. Anything else is ``lease-lost`` and changes
        nothing. Supported when the store's ``supports_journal`` is True; the journal is
        read back as :attr:`Job.journal` by ``claim`` and ``get_job``."""

    # -- what each store writes atomically (not operations a caller makes) --------------
    @abstractmethod
    def write_completions(self, op: str, completions: Sequence[Completion]) -> list[JobResult]:
        """Record every completion (at least one), each fenced on its own token, one result
        each in order; ``op`` names the call (``complete`` or ``complete_many``) in retries
        and errors. A store that can, writes them together."""

    @abstractmethod
    def write_failure(
        self, job_id: str, token: str, failure: Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        """Record ``failure`` under the receipt ``failure.op``, fenced on ``token``."""

    @abstractmethod
    def write_release(
        self, job_id: str, token: str, release: Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        """Record ``release`` under the receipt ``release``, fenced on ``token``, refunding
        the attempt; ``superseded`` when a follower holds the pending slot."""


@dataclass(frozen=True, kw_only=True)
class JobHandle(Job[T]):
    """A claimed job (``status == "active"``) with its low-level lifecycle methods.

    Application code passes a handle to :meth:`JobQueue.run_claimed`; the methods here are
    for backend integration and migrations. Every write is fenced by the claim token.
    """

    claim_token: str = field(repr=False)
    backend: FencedWrites = field(repr=False, compare=False)
    _log_buffer: list[LogEntry] = field(default_factory=list, repr=False, compare=False)
    # The snapshot this handle was made from (not an init argument, so a
    # dataclasses.replace() copy rebuilds its own).
    _job: Job[T] | None = field(default=None, init=False, repr=False, compare=False)

    def as_job(self) -> Job[T]:
        """The plain job, without lifecycle methods (what handlers receive)."""
        if self._job is not None:
            return self._job  # the snapshot the handle was made from: equal, and frozen
        return Job(**{name: getattr(self, name) for name in _job_fields()})

    def log(self, message: str) -> None:
        """Buffer a log line; it is stored with the next heartbeat or lifecycle write."""
        self._log_buffer.append(LogEntry(self.backend.now(), str(message)))

    def _take_logs(self) -> list[LogEntry]:
        logs = list(self._log_buffer)
        del self._log_buffer[: len(logs)]
        return logs

    def heartbeat(self) -> HeartbeatResult:
        return self.backend.heartbeat(self.id, self.claim_token, logs=self._take_logs())

    def complete(self, result: Any = None) -> JobResult:
        """Complete the run, keeping ``result`` (see :func:`durabl.model.payload.check_result`)."""
        if result is not None:
            result = check_result(result)
        return self.backend.complete(
            self.id, self.claim_token, logs=self._take_logs(), result=result
        )

    def fail(self, reason: str, *, retry_at: datetime | None = None) -> JobResult:
        if retry_at is None:
            retry_at = BackoffPolicy.for_job(self).next_run_at(self.attempts, self.backend.now())
        return self.backend.fail(
            self.id, self.claim_token, reason, retry_at=retry_at, logs=self._take_logs()
        )

    def fail_fatal(self, reason: str) -> JobResult:
        return self.backend.fail_fatal(self.id, self.claim_token, reason, logs=self._take_logs())

    def release(self, *, timeout: float | None = None, run_at: datetime | None = None) -> JobResult:
        return self.backend.release(
            self.id, self.claim_token, logs=self._take_logs(), timeout=timeout, run_at=run_at
        )

    def append_journal(
        self, records: Sequence[JournalRecord], *, position: int
    ) -> JournalAppendResult:
        return self.backend.append_journal(self.id, self.claim_token, records, position=position)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs ``list_jobs`` and ``count_jobs`` select: each field that is set must
    match (``search``: a prefix of the job id or of the dedupe key, or text the failure
    reason contains; ``created_after``/``updated_after``/``finished_after``: at or after
    that instant, ``created_before``/``updated_before``/``finished_before``: before it; a
    job that has not finished matches no ``finished_*`` bound; ``waiting``: suspended in an
    orchestration's wait or not, see :mod:`durabl.stores.waiting`)."""

    status: str | None = None
    type: str | None = None
    failure_kind: FailureKind | None = None
    search: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    parent_id: str | None = None
    waiting: bool | None = None

    def ranges(self) -> list[tuple[str, str, str, datetime]]:
        """The time bounds that are set: ``(filter name, job field, ">=" or "<", instant)``."""
        bounds = (
            ("created_after", "created_at", ">="),
            ("created_before", "created_at", "<"),
            ("updated_after", "updated_at", ">="),
            ("updated_before", "updated_at", "<"),
            ("finished_after", "finished_at", ">="),  # a job not finished matches neither
            ("finished_before", "finished_at", "<"),
        )
        return [
            (name, column, op, value)
            for name, column, op in bounds
            if (value := getattr(self, name)) is not None
        ]

    def equal_fields(self) -> dict[str, str]:
        """The fields a job must equal, by name: those of ``status``, ``type``,
        ``failure_kind`` and ``parent_id`` that are set (``search`` is matched its own way)."""
        fields = {"status": self.status, "type": self.type, "failure_kind": self.failure_kind}
        fields["parent_id"] = self.parent_id
        return {name: value for name, value in fields.items() if value is not None}


def job_from_fields(values: dict[str, Any]) -> Job[Any]:
    """A :class:`Job` from a dict holding every one of its fields, built without the frozen
    dataclass ``__init__`` (which sets each field through ``object.__setattr__``): stores
    build one for every job they claim or read."""
    job: Job[Any] = object.__new__(Job)
    job.__dict__.update(values)
    return job


def with_lease(job: Job[T], visibility_timeout: float) -> Job[T]:
    """``job`` with :attr:`Job.lease_expires_at` set from its last heartbeat (active jobs
    only; any other job is returned as it is)."""
    if job.status != "active" or job.heartbeat_at is None:
        return job
    expires = job.heartbeat_at + timedelta(seconds=visibility_timeout)
    values = {name: getattr(job, name) for name in _job_fields()}
    values["lease_expires_at"] = expires
    return job_from_fields(values)


def handle_for(job: Job[T], claim_token: str, backend: FencedWrites) -> JobHandle[T]:
    """A handle on a job that ``backend`` claimed with ``claim_token``."""
    if type(job) is Job:
        # Made for every claim: copy the snapshot's fields at once rather than one keyword
        # argument each (both classes are plain frozen dataclasses, no __post_init__).
        handle: JobHandle[T] = object.__new__(JobHandle)
        handle.__dict__.update(
            job.__dict__, claim_token=claim_token, backend=backend, _log_buffer=[], _job=job
        )
        return handle
    values = {name: getattr(job, name) for name in _job_fields()}
    return JobHandle(**values, claim_token=claim_token, backend=backend)


@functools.cache
def _job_fields() -> tuple[str, ...]:
    """The names of Job's fields, looked up once (handles are made for every claim)."""
    return tuple(f.name for f in fields(Job))
