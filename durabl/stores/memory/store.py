"""The bookkeeping under :class:`durabl.MemoryBackend`: one record per job, the dedupe
slots a record holds in each status, the moves between statuses that keep the two in
step, and the fence and receipts of a claimed run. The Backend methods are in
:mod:`durabl.stores.memory.backend`.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from durabl.model.backoff import BackoffKind
from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.job import (
    TERMINAL_STATUSES,
    Attempt,
    AttemptOutcome,
    DedupeScope,
    FailureKind,
    Job,
    JobFilter,
    JobResult,
    JobStatus,
    JournalRecord,
    LogEntry,
    ResultStatus,
    TerminalStatus,
    add_attempt,
    clip_text,
)
from durabl.model.options import (
    MAX_LOG_ENTRIES,
    MAX_LOG_MESSAGE_BYTES,
    RECEIPTS_KEPT,
    NewJob,
)
from durabl.model.payload import portable, to_millis
from durabl.model.rules import cancelled_reason, resolve_miss

_TERMINAL: dict[str, TerminalStatus] = {status: status for status in TERMINAL_STATUSES}
_JOB_FIELDS = tuple(f.name for f in fields(Job))
#: The Job fields a record holds under the same name.
_RECORD_FIELDS = tuple(name for name in _JOB_FIELDS if name not in ("worker", "lease_expires_at"))


def cancel_reason(rec: Record) -> str:
    """Why a run whose cancellation was requested ends cancelled."""
    return cancelled_reason(rec.cancel_requested)


@dataclass(eq=False)
class Record:
    """One stored job, mutated in place under the backend's lock."""

    id: str
    seq: int
    type: str
    data: Any
    status: JobStatus
    priority: int
    run_at: datetime
    max_attempts: int
    dedupe_key: str | None
    dedupe_scope: DedupeScope | None
    created_at: datetime
    updated_at: datetime
    backoff: BackoffKind
    backoff_delay: float
    backoff_max_delay: float
    attempts: int = 0
    fail_reason: str | None = None
    failure_kind: FailureKind | None = None
    finished_at: datetime | None = None
    claim_token: str | None = None
    heartbeat_at: datetime | None = None
    claimed_at: datetime | None = None
    lease_owner: str | None = None
    attempt_history: tuple[Attempt, ...] = ()
    #: The reason given to ``cancel()`` while the job was active (None: not requested).
    cancel_requested: str | None = None
    result: Any = None
    #: Claimed ahead of a free worker, its start not recorded yet (see durabl.model.rules).
    reserved: bool = False
    unstarted_reaps: int = 0
    #: Flow control: at most ``concurrency_limit`` active records hold this key.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    trace_context: dict[str, str] | None = None
    logs: deque[LogEntry] = field(default_factory=lambda: deque(maxlen=MAX_LOG_ENTRIES))
    receipts: deque[tuple[str, str, ResultStatus]] = field(
        default_factory=lambda: deque(maxlen=RECEIPTS_KEPT)
    )
    journal: list[JournalRecord] = field(default_factory=list)

    def order(self) -> tuple[int, datetime, int]:
        return (self.priority, self.run_at, self.seq)

    def lease_before(self, cutoff: datetime) -> bool:
        return self.heartbeat_at is not None and self.heartbeat_at < cutoff


class MemoryStore:
    """Records and dedupe slots, guarded by one re-entrant lock (:attr:`lock`) that the
    caller holds around every use. :class:`durabl.MemoryBackend` owns one and writes the
    Backend methods over it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.jobs: dict[str, Record] = {}
        self._seq = 0
        # Dedupe slots, key -> job id: pending+active holds ``_live`` while pending or
        # active; pending holds ``_pending`` while pending and ``_active`` while active.
        self.live: dict[str, str] = {}
        self.pending: dict[str, str] = {}
        self.active: dict[str, str] = {}

    # -- records and slots ----------------------------------------------------------------
    def clear(self) -> None:
        with self.lock:
            for table in (self.jobs, self.live, self.pending, self.active):
                table.clear()

    def slots(self, scope: DedupeScope | None, status: str) -> dict[str, str] | None:
        """The slot map a job of ``scope`` holds while in ``status`` (None: no slot)."""
        if status == "pending":
            return self.live if scope == "pending+active" else self.pending
        if status == "active":
            return self.live if scope == "pending+active" else self.active
        return None

    def pending_slots(self, scope: DedupeScope) -> dict[str, str]:
        """The slot map a pending job of ``scope`` holds its key in."""
        return self.live if scope == "pending+active" else self.pending

    def can_move(self, rec: Record, status: str) -> bool:
        """Whether ``rec`` could hold its slot for ``status`` (free or already its own)."""
        slots = self.slots(rec.dedupe_scope, status)
        if rec.dedupe_key is None or slots is None:
            return True
        return slots.get(rec.dedupe_key, rec.id) == rec.id

    def move(self, rec: Record, status: JobStatus, now: datetime) -> None:
        """Change status, moving the dedupe slot along; the caller checked _can_move."""
        if rec.dedupe_key is not None:
            old = self.slots(rec.dedupe_scope, rec.status)
            if old is not None and old.get(rec.dedupe_key) == rec.id:
                del old[rec.dedupe_key]
            new = self.slots(rec.dedupe_scope, status)
            if new is not None:
                new[rec.dedupe_key] = rec.id
        rec.status = status
        rec.updated_at = now
        if status != "active":
            rec.claim_token = rec.heartbeat_at = rec.claimed_at = rec.lease_owner = None
            rec.reserved = False
        if status in _TERMINAL:
            rec.finished_at = now
            rec.cancel_requested = None

    def active_per_key(self) -> Counter[str]:
        """How many active records hold each concurrency key."""
        return Counter(
            r.concurrency_key
            for r in self.jobs.values()
            if r.status == "active" and r.concurrency_key is not None
        )

    @staticmethod
    def key_allows(rec: Record, active: Counter[str]) -> bool:
        """Whether ``rec`` may become active beside ``active``; counts it in if so."""
        if rec.concurrency_key is None:
            return True
        if active[rec.concurrency_key] >= (rec.concurrency_limit or 1):
            return False
        active[rec.concurrency_key] += 1
        return True

    def check_scope(self, key: str, scope: DedupeScope) -> None:
        """Raise when ``key`` has a live job under the other scope."""
        if scope == "pending+active":
            if key in self.pending or key in self.active:
                raise DedupeScopeConflictError(key, scope, "pending")
        elif key in self.live:
            raise DedupeScopeConflictError(key, scope, "pending+active")

    @staticmethod
    def end_attempt(
        rec: Record, outcome: AttemptOutcome, now: datetime, error: str | None = None
    ) -> None:
        """Add the claim that ends now to the record's history (before the move that
        clears its lease)."""
        attempt = Attempt(rec.attempts, rec.lease_owner, rec.claimed_at, now, outcome, error)
        rec.attempt_history = add_attempt(rec.attempt_history, attempt)

    @staticmethod
    def snapshot(rec: Record) -> Job[Any]:
        values = {name: getattr(rec, name) for name in _RECORD_FIELDS}
        return Job(
            **{
                **values,
                "worker": rec.lease_owner,
                "data": copy.deepcopy(rec.data),
                "result": copy.deepcopy(rec.result),
                "logs": tuple(rec.logs),
                "journal": tuple(copy.deepcopy(rec.journal)),
                "trace_context": None if rec.trace_context is None else dict(rec.trace_context),
            }
        )

    def add(self, job: NewJob, now: datetime) -> Record:
        """A new pending record holding its pending slot (checked free by the caller)."""
        self._seq += 1
        rec = Record(
            id=uuid.uuid4().hex,
            seq=self._seq,
            type=job.type,
            data=portable(job.data),
            status="pending",
            priority=job.priority,
            run_at=to_millis(job.run_at) if job.run_at is not None else now,
            max_attempts=job.max_attempts,
            dedupe_key=job.dedupe_key,
            dedupe_scope=job.scope_for_store,
            created_at=now,
            updated_at=now,
            backoff=job.backoff.kind,
            backoff_delay=job.backoff.delay,
            backoff_max_delay=job.backoff.max_delay,
            concurrency_key=job.concurrency_key,
            concurrency_limit=job.concurrency_limit,
            trace_context=None if job.trace_context is None else dict(job.trace_context),
        )
        self.jobs[rec.id] = rec
        slots = self.slots(rec.dedupe_scope, "pending")
        if rec.dedupe_key is not None and slots is not None:
            slots[rec.dedupe_key] = rec.id
        return rec

    def select(self, filters: JobFilter) -> list[Record]:
        equal = filters.equal_fields().items()
        search = filters.search
        ranges = [(column, op == ">=", value) for _, column, op, value in filters.ranges()]
        return [
            r
            for r in self.jobs.values()
            if all(getattr(r, name) == value for name, value in equal)
            and all(
                (at := getattr(r, column)) is not None and (at >= value if at_least else at < value)
                for column, at_least, value in ranges
            )
            and (not search or self.matches(r, search))
        ]

    @staticmethod
    def matches(r: Record, search: str) -> bool:
        """Whether ``search`` is a prefix of the id or of the dedupe key, or text in the
        failure reason, of ``r``."""
        return (
            r.id.startswith(search)
            or (r.dedupe_key is not None and r.dedupe_key.startswith(search))
            or (r.fail_reason is not None and search in r.fail_reason)
        )

    def searched(self, rows: list[Record], search: str | None) -> list[Record]:
        """The ``rows`` that ``search`` matches, in their order."""
        return [r for r in rows if not search or self.matches(r, search)]

    # -- fences and receipts --------------------------------------------------------------
    def fence(self, job_id: str, token: str, op: str) -> Record | JobResult:
        """The record when ``token`` holds the claim; else why the write misses: its own
        earlier result, a terminal job, a lost lease, or no job at all."""
        rec = self.jobs.get(job_id)
        if rec is None:
            return resolve_miss(None, None)
        if rec.status == "active" and rec.claim_token == token:
            return rec
        receipt = next((r for t, o, r in rec.receipts if t == token and o == op), None)
        return resolve_miss(rec.status, receipt)

    @staticmethod
    def add_logs(rec: Record, logs: Sequence[LogEntry]) -> None:
        rec.logs.extend(
            LogEntry(to_millis(e.at), clip_text(e.message, MAX_LOG_MESSAGE_BYTES)) for e in logs
        )

    def applied(
        self, rec: Record, token: str, op: str, result: ResultStatus, logs: Sequence[LogEntry]
    ) -> JobResult:
        self.add_logs(rec, logs)
        rec.receipts.append((token, op, result))
        return JobResult(result)
