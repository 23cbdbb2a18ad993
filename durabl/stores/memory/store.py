"""The bookkeeping under :class:`durabl.MemoryBackend`: one record per job, the dedupe
slots a record holds in each status, the moves between statuses that keep the two in step,
what each fenced write does to the record it holds, and the reads over the records. The
Backend methods (the lock, the fences and receipts) are in
:mod:`durabl.stores.memory.backend`.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

from durabl.model import activity, rules
from durabl.model.attempts import Attempt, AttemptOutcome, add_attempt
from durabl.model.backoff import BackoffKind
from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.job import (
    TERMINAL_STATUSES,
    Completion,
    DedupeScope,
    Failure,
    FailureKind,
    Job,
    JobFilter,
    JobResult,
    JobStatus,
    JournalRecord,
    LogEntry,
    Release,
    ResultStatus,
    clip_text,
)
from durabl.model.options import MAX_LOG_ENTRIES, MAX_LOG_MESSAGE_BYTES, RECEIPTS_KEPT, NewJob
from durabl.model.payload import portable, to_millis
from durabl.model.reports import QueueStats
from durabl.model.signals import StoredSignal

#: The Job fields a record holds under the same name.
_RECORD_FIELDS = tuple(f.name for f in fields(Job) if f.name not in ("worker", "lease_expires_at"))


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
    timeout: float | None = None
    parent_id: str | None = None
    parent_step: str | None = None
    #: The signals sent to the job, in the order stored (``seq`` is the position).
    signals: list[StoredSignal] = field(default_factory=list)
    logs: deque[LogEntry] = field(default_factory=lambda: deque(maxlen=MAX_LOG_ENTRIES))
    #: (claim token, operation, result) of the fenced writes that applied, newest last.
    receipts: deque[tuple[str, str, ResultStatus]] = field(
        default_factory=lambda: deque(maxlen=RECEIPTS_KEPT)
    )
    journal: list[JournalRecord] = field(default_factory=list)

    def order(self) -> tuple[int, datetime, int]:
        """Where the record stands among due pending ones: claims take the lowest first."""
        return (self.priority, self.run_at, self.seq)


class MemoryStore:
    """Records and dedupe slots, guarded by one re-entrant lock (:attr:`lock`) that the
    caller holds around every use. :class:`durabl.MemoryBackend` owns one and writes the
    Backend methods over it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.jobs: dict[str, Record] = {}
        self._seq = 0
        # Dedupe slots, key -> job id: pending+active holds ``live`` while pending or
        # active; pending holds ``pending`` while pending and ``active`` while active.
        self.live: dict[str, str] = {}
        self.pending: dict[str, str] = {}
        self.active: dict[str, str] = {}

    def clear(self) -> None:
        with self.lock:
            for table in (self.jobs, self.live, self.pending, self.active):
                table.clear()

    # -- dedupe slots and moves -----------------------------------------------------------
    def pending_slots(self, scope: DedupeScope | None) -> dict[str, str]:
        """The slot map a pending job of ``scope`` holds its key in."""
        return self.live if scope == "pending+active" else self.pending

    def slots(self, scope: DedupeScope | None, status: str) -> dict[str, str] | None:
        """The slot map a job of ``scope`` holds while in ``status`` (None: no slot)."""
        if status == "pending":
            return self.pending_slots(scope)
        if status == "active":
            return self.live if scope == "pending+active" else self.active
        return None

    def other_scope(self, key: str, scope: DedupeScope | None) -> DedupeScope | None:
        """The other scope when ``key`` has a live job under it (a key lives under one
        scope at a time), else None."""
        if scope == "pending+active":
            return "pending" if key in self.pending or key in self.active else None
        return "pending+active" if key in self.live else None

    def check_scopes(self, jobs: Sequence[NewJob]) -> None:
        """``DedupeScopeConflictError`` when the key of one of ``jobs`` is live under the
        other scope (checked for all before a batch stores any)."""
        for job in jobs:
            key = job.dedupe_key
            other = None if key is None else self.other_scope(key, job.dedupe_scope)
            if key is not None and other is not None:
                raise DedupeScopeConflictError(key, job.dedupe_scope, other)

    def holders(self, key: str, *slot_maps: dict[str, str]) -> list[Record]:
        """The records that hold ``key`` in ``slot_maps``."""
        return [self.jobs[slots[key]] for slots in slot_maps if key in slots]

    def can_move(self, rec: Record, status: str) -> bool:
        """Whether ``rec`` could hold its slot for ``status`` (free or already its own)."""
        slots = self.slots(rec.dedupe_scope, status)
        if rec.dedupe_key is None or slots is None:
            return True
        return slots.get(rec.dedupe_key, rec.id) == rec.id

    def move(
        self,
        rec: Record,
        status: JobStatus,
        now: datetime,
        ended: AttemptOutcome | None = None,
        error: str | None = None,
    ) -> None:
        """Change status, moving the dedupe slot along (the caller checked
        :meth:`can_move`); ``ended``: the outcome of the claim this move ends, added to
        the history (with ``error``) before the lease is cleared."""
        if ended is not None:
            attempt = Attempt(rec.attempts, rec.lease_owner, rec.claimed_at, now, ended, error)
            rec.attempt_history = add_attempt(rec.attempt_history, attempt)
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
        if status in TERMINAL_STATUSES:
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

    # -- records --------------------------------------------------------------------------
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
            timeout=job.timeout,
            parent_id=job.parent_id,
            parent_step=job.parent_step,
        )
        self.jobs[rec.id] = rec
        if rec.dedupe_key is not None:
            self.pending_slots(rec.dedupe_scope)[rec.dedupe_key] = rec.id
        return rec

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
                "timeout": rec.timeout,
            }
        )

    # -- claims, fences and receipts ------------------------------------------------------
    def claimed(self, job_id: str, token: str) -> Record | None:
        """The record while ``token`` holds its claim, else None."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.status != "active" or rec.claim_token != token:
            return None
        return rec

    def missed(self, job_id: str, token: str, op: str) -> JobResult:
        """Why a write ``op`` fenced on ``token`` missed: its own earlier result, a
        terminal job, a lost lease, or no job at all."""
        rec = self.jobs.get(job_id)
        if rec is None:
            return rules.resolve_miss(None, None)
        receipt = next((r for t, o, r in rec.receipts if t == token and o == op), None)
        return rules.resolve_miss(rec.status, receipt)

    @staticmethod
    def add_logs(rec: Record, logs: Sequence[LogEntry]) -> None:
        rec.logs.extend(
            LogEntry(to_millis(e.at), clip_text(e.message, MAX_LOG_MESSAGE_BYTES)) for e in logs
        )

    # -- what each fenced write does to the record its claim holds: the receipt's result --
    def completed(self, completion: Completion, rec: Record, now: datetime) -> ResultStatus:
        self.move(rec, "completed", now, "completed")
        rec.result = portable(completion.result)
        return "completed"

    def cancelled(self, rec: Record, now: datetime) -> ResultStatus:
        """A run whose cancellation was requested ends ``cancelled``, however it ended."""
        reason = rules.cancelled_reason(rec.cancel_requested)
        self.move(rec, "cancelled", now, "cancelled", reason)
        rec.fail_reason = reason
        return "cancelled"

    def superseded(self, rec: Record, now: datetime, error: str | None = None) -> ResultStatus:
        """A pending follower holds the key's pending slot: it covers this run's work (the
        attempt keeps ``error``, the failure that ended the run, if any)."""
        self.move(rec, "superseded", now, "superseded", error)
        return "superseded"

    def failed(self, failure: Failure, rec: Record, now: datetime) -> ResultStatus:
        end = rules.failure_end(
            retrying=failure.retry_at is not None,
            attempts=rec.attempts,
            max_attempts=rec.max_attempts,
            cancel_requested=rec.cancel_requested is not None,
        )
        if end == "cancel":
            return self.cancelled(rec, now)
        if end == "fail":
            self.move(rec, "failed", now, failure.terminal_outcome, failure.error)
            rec.fail_reason = failure.reason
            rec.failure_kind = failure.kind
            return "failed-terminal"
        rec.fail_reason = failure.reason  # the last failure's, superseded or retried
        if not self.can_move(rec, "pending"):
            return self.superseded(rec, now, failure.error)
        self.move(rec, "pending", now, "retry-scheduled", failure.error)
        rec.run_at = to_millis(failure.retry_at or now)  # "retry": retry_at is set
        return "retry-scheduled"

    def released(self, release: Release, rec: Record, now: datetime) -> ResultStatus:
        """Back to pending at its old ``run_at`` (or at ``release.run_at``), refunding the
        attempt."""
        if rec.cancel_requested is not None:
            return self.cancelled(rec, now)
        if not self.can_move(rec, "pending"):
            return self.superseded(rec, now)
        self.move(rec, "pending", now, release.outcome)
        rec.attempts -= 1
        if release.run_at is not None:
            rec.run_at = to_millis(release.run_at)
        return "released"

    def reaped(self, rec: Record, now: datetime) -> rules.ReapOutcome:
        """End or requeue ``rec``, whose lease expired, as :func:`rules.reap_decision`
        says; what the reaper counts for it."""
        decision = rules.reap_decision(
            rec.attempts,
            rec.max_attempts,
            reserved=rec.reserved,
            unstarted_reaps=rec.unstarted_reaps,
            cancel_requested=rec.cancel_requested is not None,
        )
        superseded = False
        if decision == "cancel":  # its worker is gone: cancelled now
            self.cancelled(rec, now)
        elif decision == "stall":
            self.move(rec, "failed", now, "stalled", rules.STALLED_REASON)
            rec.failure_kind = "stalled"
            rec.fail_reason = rules.STALLED_REASON
        elif not self.can_move(rec, "pending"):
            self.superseded(rec, now, rules.STALLED_REASON)
            superseded = True
        else:
            self.move(rec, "pending", now, "lease-lost", rules.STALLED_REASON)
            rec.run_at = now
            if decision == "refund":
                rec.attempts -= 1
                rec.unstarted_reaps += 1
        return rules.reap_outcome(decision, superseded)

    # -- reads ----------------------------------------------------------------------------
    def select(self, filters: JobFilter) -> list[Record]:
        equal = filters.equal_fields().items()
        ranges = [(column, op == ">=", value) for _, column, op, value in filters.ranges()]
        return [
            r
            for r in self.jobs.values()
            if all(getattr(r, name) == value for name, value in equal)
            and all(
                (at := getattr(r, column)) is not None and (at >= value if at_least else at < value)
                for column, at_least, value in ranges
            )
            and self.matches(r, filters.search)
            and (not filters.waiting or bool(r.journal))  # see durabl.stores.waiting
        ]

    @staticmethod
    def matches(r: Record, search: str | None) -> bool:
        """Whether ``search`` (none: everything) is a prefix of the id or of the dedupe
        key, or text in the failure reason, of ``r``."""
        return (
            not search
            or r.id.startswith(search)
            or (r.dedupe_key is not None and r.dedupe_key.startswith(search))
            or (r.fail_reason is not None and search in r.fail_reason)
        )

    def selected(
        self, filters: JobFilter, order: rules.JobOrder | None, newest: int | None
    ) -> list[Record]:
        """The selected records in ``order`` (None: the list's own); ``newest``: only
        among that many of the list's first records in its own order."""
        rows = self.select(filters if newest is None else replace(filters, search=None))
        rows.sort(key=lambda r: r.seq, reverse=True)
        if rules.lists_by_finish(filters):  # a stable sort: jobs not finished stay newest first
            rows.sort(key=_unset_lowest("finished_at"), reverse=True)
        if newest is not None:
            rows = [r for r in rows[:newest] if self.matches(r, filters.search)]
        if order is not None:  # stable sorts: ties newest first
            rows.sort(key=lambda r: r.seq, reverse=True)
            rows.sort(key=_unset_lowest(order.field), reverse=order.descending)
        return rows

    def find_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        """What :meth:`durabl.stores.base.Backend.read_activity` reads, for ``types``."""
        chosen = set(types)
        counts: Counter[tuple[str, str, int]] = Counter()
        candidates: list[activity.WaitCandidate] = []
        pending: dict[str, list[Record]] = {}  # type -> its jobs due by the window's end
        for r in self.jobs.values():
            if r.type not in chosen:
                continue
            if r.status == "pending":
                if r.run_at <= window.until:
                    pending.setdefault(r.type, []).append(r)
            elif r.status == "active":
                if (r.heartbeat_at or r.updated_at) >= window.since:
                    candidates.append(_candidate(r))
            elif r.finished_at is not None:
                bucket = window.bucket(r.finished_at)
                if r.status in activity.COUNTED_STATUSES and bucket is not None:
                    counts[(r.type, r.status, bucket)] += 1
                if activity.spans_an_end(window, r.run_at, r.finished_at):
                    candidates.append(_candidate(r))
        for waiting in pending.values():
            waiting.sort(key=lambda r: (r.run_at, -r.seq))
            candidates.extend(_candidate(r) for r in waiting[: activity.PENDING_SCAN])
        return activity.ActivityRead(dict(counts), tuple(candidates))


def stats(rows: list[Record], now: datetime) -> QueueStats:
    """The :class:`QueueStats` of ``rows`` at ``now``."""
    counts = Counter(r.status for r in rows)
    by_kind = Counter(r.failure_kind for r in rows if r.status == "failed")
    due = [r.run_at for r in rows if r.status == "pending" and r.run_at <= now]
    return rules.stats_from_counts(counts, by_kind, min(due, default=None), now)


def _unset_lowest(field: str) -> Callable[[Record], tuple[bool, Any]]:
    """A sort key on ``field`` that puts None (a job not finished) below every value."""
    return lambda r: (getattr(r, field) is not None, getattr(r, field))


def _candidate(rec: Record) -> activity.WaitCandidate:
    return activity.WaitCandidate(
        type=rec.type,
        status=rec.status,
        run_at=rec.run_at,
        created_at=rec.created_at,
        updated_at=rec.updated_at,
        heartbeat_at=rec.heartbeat_at,
        starts=tuple(a.started_at for a in rec.attempt_history if a.started_at is not None),
    )
