"""In-process backends: MemoryBackend, and the DummyBackend and ImmediateBackend built on it.

They keep the observable semantics of :class:`durabl.MongoJobQueue` (dedupe slots, fencing,
receipts, reaping) with nothing but dicts and one lock, so tests and small tools can run a
real :class:`durabl.JobQueue` without a database. The records and dedupe slots they keep
are in :mod:`durabl.stores.memory.store`; this module holds the Backend methods over them.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durabl.model import activity
from durabl.model import job as model
from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.flow import MAX_RATE_LIMIT, RateLimit
from durabl.model.job import Job, JobFilter, JobHandle, JobResult, LogEntry, handle_for
from durabl.model.options import NewJob
from durabl.model.payload import portable, to_millis
from durabl.model.rules import (
    STALLED_REASON,
    JobOrder,
    JobPage,
    lists_by_finish,
    reap_decision,
    stats_from_counts,
)
from durabl.stores import base
from durabl.stores.base import (
    BACKEND_OPERATIONS,
    Backend,
    EnqueueResult,
    InlineClaimResult,
    StoreBase,
)
from durabl.stores.memory.schedules import MemorySchedules
from durabl.stores.memory.store import MemoryStore, Record, cancel_reason
from durabl.stores.memory.workers import MemoryWorkers

__all__ = ["DummyBackend", "ImmediateBackend", "MemoryBackend"]


class MemoryBackend(StoreBase):
    """Jobs in a dict, guarded by one re-entrant lock. Nothing survives the process.

    ``clock_skew_allowance`` (seconds) is added to the reaper's cutoff like MongoJobQueue's;
    it defaults to 0 here since one process has one clock. The records and slots are a
    :class:`~durabl.stores.memory.store.MemoryStore` this backend owns.
    """

    supports_journal: bool = True
    supports_schedules: bool = True
    supports_workers: bool = True

    def __init__(self, *, clock: Clock | None = None, clock_skew_allowance: float = 0.0) -> None:
        self.clock = clock or SYSTEM_CLOCK
        self.clock_skew_allowance = float(clock_skew_allowance)
        self._store = MemoryStore()
        self._rates: dict[str, RateLimit] = {}
        self._starts: dict[str, tuple[datetime, int]] = {}  # type -> (window, claims in it)
        self.schedules = MemorySchedules(
            self._store.lock, lambda job: self._enqueue(job, self.now())
        )
        self.workers = MemoryWorkers(self._store.lock)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(jobs={len(self._store.jobs)})"

    # -- plumbing -------------------------------------------------------------------------
    def startup(self) -> None:
        """Nothing to create."""

    def now(self) -> datetime:
        return to_millis(self.clock.now())

    # -- enqueue --------------------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        with self._store.lock:
            return self._enqueue(job, self.now())

    def _enqueue(self, job: NewJob, now: datetime) -> EnqueueResult:
        key = job.dedupe_key
        if key is not None:
            self._store.check_scope(key, job.dedupe_scope)
            if key in self._store.pending_slots(job.dedupe_scope):
                return self._slot_taken(job, now)
        return EnqueueResult(self._store.add(job, now).id)

    def _slot_taken(self, job: NewJob, now: datetime) -> EnqueueResult:
        """The pending slot is held: with coalesce="latest", replace the payload of a
        pending holder of the same type."""
        if job.coalesce != "latest" or job.dedupe_key is None:
            return EnqueueResult(None)
        slots = self._store.pending_slots(job.dedupe_scope)
        holder = self._store.jobs.get(slots.get(job.dedupe_key, ""))
        if holder is None or holder.status != "pending" or holder.type != job.type:
            return EnqueueResult(None)
        holder.data = portable(job.data)
        holder.updated_at = now
        return EnqueueResult(None, coalesced=True)

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        with self._store.lock:
            now = self.now()
            if job.dedupe_key is not None and job.dedupe_scope == "pending":
                enq = self._enqueue(job, now)
                if enq.job_id is None:
                    return InlineClaimResult(None, None, enq.coalesced)
                rec = self._store.jobs[enq.job_id]
                if not self._store.can_move(rec, "active"):
                    return InlineClaimResult(None, enq.job_id)  # a follower of the active run
                if not self._store.key_allows(rec, self._store.active_per_key()):
                    return InlineClaimResult(None, enq.job_id)  # waits for its key
                return InlineClaimResult(self._claim_record(rec, now, lease_owner))
            if job.dedupe_key is not None:
                self._store.check_scope(job.dedupe_key, job.dedupe_scope)
                if job.dedupe_key in self._store.live:
                    return InlineClaimResult(None, None, self._slot_taken(job, now).coalesced)
            rec = self._store.add(job, now)
            if not self._store.key_allows(rec, self._store.active_per_key()):
                return InlineClaimResult(None, rec.id)  # pending until its key has room
            return InlineClaimResult(self._claim_record(rec, now, lease_owner))

    # -- claiming -------------------------------------------------------------------------
    def _claim_record(
        self, rec: Record, now: datetime, owner: str, reserve: bool = False
    ) -> JobHandle[Any]:
        self._store.move(rec, "active", now)
        rec.attempts += 1
        rec.reserved = reserve
        rec.claim_token = token = uuid.uuid4().hex
        rec.heartbeat_at = rec.claimed_at = now
        rec.lease_owner = owner
        return handle_for(self._store.snapshot(rec), token, self)

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        with self._store.lock:
            now = self.now()
            due = [
                r
                for r in self._store.jobs.values()
                if r.status == "pending" and r.type == type and r.run_at <= now
            ]
            claimed: list[JobHandle[Any]] = []
            limit = min(limit, self._rate_allowance(type, now))
            active = self._store.active_per_key()
            for rec in sorted(due, key=Record.order):
                if len(claimed) >= limit:
                    break
                if self._store.can_move(rec, "active") and self._store.key_allows(rec, active):
                    # (else a follower behind an active run, or its key has its limit)
                    reserve = starting is not None and len(claimed) >= starting
                    claimed.append(self._claim_record(rec, now, lease_owner, reserve))
            self._count_starts(type, now, len(claimed))
            return claimed

    def _rate_allowance(self, type: str, now: datetime) -> int:
        """How many jobs of ``type`` may start now (counted as claimed by the caller)."""
        rate = self._rates.get(type)
        if rate is None:
            return MAX_RATE_LIMIT
        window = rate.window_start(now)
        started = self._starts.get(type)
        return rate.allowance(started[1] if started and started[0] == window else 0)

    def _count_starts(self, type: str, now: datetime, count: int) -> None:
        rate = self._rates.get(type)
        if rate is None or not count:
            return
        window = rate.window_start(now)
        started = self._starts.get(type)
        before = started[1] if started and started[0] == window else 0
        self._starts[type] = (window, before + count)

    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        with self._store.lock:
            if rate is None:
                self._rates.pop(type, None)
            else:
                self._rates[type] = rate

    def read_rate_limit(self, type: str) -> RateLimit | None:
        with self._store.lock:
            return self._rates.get(type)

    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        with self._store.lock:
            for job_id, token in claims:
                rec = self._store.jobs.get(job_id)
                if rec is not None and rec.status == "active" and rec.claim_token == token:
                    rec.reserved = False

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        with self._store.lock:
            now = self.now()
            holders = (
                self._store.jobs.get(s.get(dedupe_key, ""))
                for s in (self._store.pending, self._store.live)
            )
            due = [
                r
                for r in holders
                if r is not None and r.status == "pending" and r.type == type and r.run_at <= now
            ]
            if not due:
                return None
            rec = min(due, key=Record.order)
            if not self._store.can_move(rec, "active"):
                return None
            if not self._store.key_allows(rec, self._store.active_per_key()):
                return None
            return self._claim_record(rec, now, lease_owner)

    # -- fenced writes --------------------------------------------------------------------
    def _supersede(
        self, rec: Record, token: str, op: str, now: datetime, logs: Sequence[LogEntry]
    ) -> JobResult:
        """A pending follower holds the key's pending slot: it covers this run's work."""
        self._store.end_attempt(rec, "superseded", now)
        self._store.move(rec, "superseded", now)
        return self._store.applied(rec, token, op, "superseded", logs)

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> model.HeartbeatResult:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is None or rec.status != "active" or rec.claim_token != token:
                return "lease-lost"
            rec.heartbeat_at = self.now()
            self._store.add_logs(rec, logs)
            return "applied" if rec.cancel_requested is None else "cancel-requested"

    def write_completions(self, op: str, completions: Sequence[base.Completion]) -> list[JobResult]:
        with self._store.lock:
            return [self._complete(c) for c in completions]

    def _complete(self, completion: base.Completion) -> JobResult:
        token = completion.token
        rec = self._store.fence(completion.job_id, token, "complete")
        if isinstance(rec, JobResult):
            return rec
        now = self.now()
        self._store.end_attempt(rec, "completed", now)
        self._store.move(rec, "completed", now)
        rec.result = portable(completion.result)
        return self._store.applied(rec, token, "complete", "completed", completion.logs)

    def _end_cancelled(
        self, rec: Record, token: str, op: str, now: datetime, logs: Sequence[LogEntry]
    ) -> JobResult:
        """A run whose cancellation was requested ends ``cancelled``, however it ended."""
        reason = cancel_reason(rec)
        self._store.end_attempt(rec, "cancelled", now, reason)
        self._store.move(rec, "cancelled", now)
        rec.fail_reason = reason
        return self._store.applied(rec, token, op, "cancelled", logs)

    def write_cancel(self, job_id: str, reason: str) -> model.CancelOutcome:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is None:
                return "not-cancellable"
            if rec.status == "pending":
                self._store.move(rec, "cancelled", self.now())
                rec.fail_reason = reason
                return "cancelled"
            if rec.status == "active" and rec.cancel_requested is None:
                rec.cancel_requested = reason
                return "requested"
            return "not-cancellable"

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        with self._store.lock:
            rec = self._store.fence(job_id, token, "cancel")
            if isinstance(rec, JobResult):
                return rec
            return self._end_cancelled(rec, token, "cancel", self.now(), logs)

    def write_failure(
        self, job_id: str, token: str, failure: base.Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        op = failure.op
        with self._store.lock:
            rec = self._store.fence(job_id, token, op)
            if isinstance(rec, JobResult):
                return rec
            now = self.now()
            if rec.cancel_requested is not None:  # not back to pending: it was cancelled
                return self._end_cancelled(rec, token, op, now, logs)
            if failure.retry_at is None or rec.attempts >= rec.max_attempts:
                self._store.end_attempt(rec, failure.terminal_outcome, now, failure.error)
                self._store.move(rec, "failed", now)
                rec.fail_reason = failure.reason
                rec.failure_kind = failure.kind
                return self._store.applied(rec, token, op, "failed-terminal", logs)
            if not self._store.can_move(rec, "pending"):
                return self._supersede(rec, token, op, now, logs)  # reason not kept
            self._store.end_attempt(rec, "retry-scheduled", now, failure.error)
            self._store.move(rec, "pending", now)
            rec.run_at = to_millis(failure.retry_at)
            rec.fail_reason = failure.reason
            return self._store.applied(rec, token, op, "retry-scheduled", logs)

    def write_release(
        self, job_id: str, token: str, release: base.Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        """Back to pending at its old ``run_at`` (or at ``release.run_at``), refunding the
        attempt. The timeout needs no bound here: a memory write never blocks for long."""
        with self._store.lock:
            rec = self._store.fence(job_id, token, "release")
            if isinstance(rec, JobResult):
                return rec
            now = self.now()
            if rec.cancel_requested is not None:
                return self._end_cancelled(rec, token, "release", now, logs)
            if not self._store.can_move(rec, "pending"):
                return self._supersede(rec, token, "release", now, logs)
            self._store.end_attempt(rec, "released", now)
            self._store.move(rec, "pending", now)
            rec.attempts -= 1
            if release.run_at is not None:
                rec.run_at = to_millis(release.run_at)
            return self._store.applied(rec, token, "release", "released", logs)

    def append_journal(
        self, job_id: str, token: str, records: Sequence[model.JournalRecord], *, position: int
    ) -> model.JournalAppendResult:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is None or rec.status != "active" or rec.claim_token != token:
                return "lease-lost"
            if len(rec.journal) == position:
                rec.journal.extend(portable(dict(r)) for r in records)
                return "applied"
            # Only the claim holder appends: a longer journal is this append, repeated.
            return "applied" if len(rec.journal) >= position + len(records) else "lease-lost"

    # -- recovery -------------------------------------------------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> model.ReapReport:
        with self._store.lock:
            now = self.now()
            cutoff = now - timedelta(seconds=visibility_timeout + self.clock_skew_allowance)
            stuck = sorted(
                (
                    r
                    for r in self._store.jobs.values()
                    if r.status == "active" and r.lease_before(cutoff)
                ),
                key=lambda r: (r.heartbeat_at or now, r.seq),
            )
            if limit:  # as Mongo's cursor limit: 0 means no limit
                stuck = stuck[: abs(limit)]
            recovered = stalled = superseded = 0
            for rec in stuck:
                decision = reap_decision(
                    rec.attempts,
                    rec.max_attempts,
                    reserved=rec.reserved,
                    unstarted_reaps=rec.unstarted_reaps,
                    cancel_requested=rec.cancel_requested is not None,
                )
                if decision == "cancel":  # its worker is gone: cancelled now
                    reason = cancel_reason(rec)
                    self._store.end_attempt(rec, "cancelled", now, reason)
                    self._store.move(rec, "cancelled", now)
                    rec.fail_reason = reason
                    recovered += 1
                elif decision == "stall":
                    self._store.end_attempt(rec, "stalled", now, STALLED_REASON)
                    self._store.move(rec, "failed", now)
                    rec.failure_kind = "stalled"
                    rec.fail_reason = STALLED_REASON
                    stalled += 1
                elif self._store.can_move(rec, "pending"):
                    self._store.end_attempt(rec, "lease-lost", now, STALLED_REASON)
                    self._store.move(rec, "pending", now)
                    rec.run_at = now
                    if decision == "refund":
                        rec.attempts -= 1
                        rec.unstarted_reaps += 1
                    recovered += 1
                else:
                    self._store.end_attempt(rec, "superseded", now, STALLED_REASON)
                    self._store.move(rec, "superseded", now)
                    superseded += 1
            ids = tuple(r.id for r in stuck)
            return model.ReapReport(recovered, stalled, superseded, len(stuck) >= limit, ids)

    # -- queries and operations -----------------------------------------------------------
    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        with self._store.lock:
            for slots in (self._store.live, self._store.pending, self._store.active):
                rec = self._store.jobs.get(slots.get(dedupe_key, ""))
                if rec is not None and rec.type == type:
                    return True
            return False

    def get_job(self, job_id: str) -> Job[Any] | None:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            return self._store.snapshot(rec) if rec is not None else None

    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        limit, offset = page.limit, page.offset
        with self._store.lock:
            rows = self._selected(filters, page.order, page.newest)
            rows = rows[offset : offset + limit] if limit else rows[offset:]
            return [self._store.snapshot(r) for r in rows]

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        with self._store.lock:
            found = len(self._selected(filters, None, newest))
        return found if at_most is None else min(found, at_most)

    def _selected(
        self, filters: JobFilter, order: JobOrder | None, newest: int | None
    ) -> list[Record]:
        """The selected records in ``order`` (None: the list's own); ``newest``: only
        among that many of the list's first records in its own order."""
        walked = filters if newest is None else replace(filters, search=None)
        rows = self._store.select(walked)
        rows.sort(key=lambda r: r.seq, reverse=True)
        if (order is None or newest is not None) and lists_by_finish(filters):
            # A stable sort: jobs not finished stay newest first.
            rows.sort(key=lambda r: (r.finished_at is not None, r.finished_at), reverse=True)
        if newest is not None:
            rows = self._store.searched(rows[:newest], filters.search)
            if order is not None:
                rows.sort(key=lambda r: r.seq, reverse=True)
        if order is not None:  # a stable sort: ties stay newest first
            field = order.field  # None (a job not finished) below every finish time
            rows.sort(
                key=lambda r: (getattr(r, field) is not None, getattr(r, field)),
                reverse=order.descending,
            )
        return rows

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        with self._store.lock:
            before = self.now() - timedelta(seconds=older_than)
            doomed = [
                r.id
                for r in self._store.jobs.values()
                if r.status in statuses and r.finished_at is not None and r.finished_at < before
            ]
            for job_id in doomed:  # terminal records hold no dedupe slot
                del self._store.jobs[job_id]
            return len(doomed)

    def retry(self, job_id: str) -> bool:
        """failed -> pending, due now, attempts 0. False when the job is not failed or its
        key is live (under either scope)."""
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is None or rec.status != "failed" or not self._store.can_move(rec, "pending"):
                return False
            if rec.dedupe_key is not None and rec.dedupe_scope is not None:
                try:
                    self._store.check_scope(rec.dedupe_key, rec.dedupe_scope)
                except DedupeScopeConflictError:
                    return False
            now = self.now()
            self._store.move(rec, "pending", now)
            rec.attempts = 0
            rec.run_at = now
            rec.failure_kind = None
            rec.finished_at = None
            return True

    def retry_selected(self, filters: JobFilter) -> int:
        """Each selected job as :meth:`retry` would, oldest first, under the one lock."""
        with self._store.lock:
            records = sorted(self._store.select(filters), key=lambda r: r.seq)
            return sum(self.retry(rec.id) for rec in records)

    def delete_selected(self, filters: JobFilter) -> int:
        with self._store.lock:
            return sum(self.delete(rec.id) for rec in self._store.select(filters))

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        """Each selected job as :meth:`write_cancel` would, under the one lock."""
        with self._store.lock:
            outcomes = [self.write_cancel(rec.id, reason) for rec in self._store.select(filters)]
            return sum(outcome != "not-cancellable" for outcome in outcomes)

    def run_now(self, job_id: str) -> bool:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is None or rec.status != "pending":
                return False
            self._due_now([rec])
            return True

    def run_now_selected(self, filters: JobFilter) -> int:
        with self._store.lock:
            return self._due_now(self._store.select(filters))

    def _due_now(self, records: list[Record]) -> int:
        """Make the delayed ones of ``records`` (pending) due now; how many there were."""
        now = self.now()
        delayed = [rec for rec in records if rec.run_at > now]
        for rec in delayed:
            rec.run_at = rec.updated_at = now
        return len(delayed)

    def delete(self, job_id: str) -> bool:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is None or rec.status == "active":
                return False
            slots = self._store.slots(rec.dedupe_scope, rec.status)
            if slots is not None and rec.dedupe_key is not None:
                slots.pop(rec.dedupe_key, None)  # a pending job holds its pending slot
            del self._store.jobs[job_id]
            return True

    def get_stats(self, type: str | None = None) -> model.QueueStats:
        with self._store.lock:
            now = self.now()
            rows = [r for r in self._store.jobs.values() if type is None or r.type == type]
            return _stats(rows, now)

    def job_types(self) -> list[str]:
        with self._store.lock:
            return sorted({r.type for r in self._store.jobs.values()})

    def stats_by_type(self) -> dict[str, model.QueueStats]:
        with self._store.lock:
            now = self.now()
            by_type: dict[str, list[Record]] = {}
            for rec in self._store.jobs.values():
                by_type.setdefault(rec.type, []).append(rec)
            return {t: _stats(by_type[t], now) for t in sorted(by_type)}

    def find_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        with self._store.lock:
            chosen = set(types)
            rows = [r for r in self._store.jobs.values() if r.type in chosen]
            counts: Counter[tuple[str, str, int]] = Counter()
            candidates = []
            pending: dict[str, list[Record]] = {}
            for r in rows:
                if r.status == "pending":
                    if r.run_at <= window.until:
                        pending.setdefault(r.type, []).append(r)
                    continue
                if r.status == "active":
                    claimed = r.heartbeat_at or r.updated_at
                    if claimed >= window.since:
                        candidates.append(_candidate(r))
                    continue
                if r.finished_at is None:
                    continue
                if r.status in activity.COUNTED_STATUSES:
                    bucket = window.bucket(r.finished_at)
                    if bucket is not None:
                        counts[(r.type, r.status, bucket)] += 1
                if activity.spans_an_end(window, r.run_at, r.finished_at):
                    candidates.append(_candidate(r))
            for waiting in pending.values():
                waiting.sort(key=lambda r: (r.run_at, -r.seq))
                candidates.extend(_candidate(r) for r in waiting[: activity.PENDING_SCAN])
            return activity.ActivityRead(dict(counts), tuple(candidates))


def _stats(rows: list[Record], now: datetime) -> model.QueueStats:
    counts = Counter(r.status for r in rows)
    by_kind = Counter(r.failure_kind for r in rows if r.status == "failed")
    due = [r.run_at for r in rows if r.status == "pending" and r.run_at <= now]
    return stats_from_counts(counts, by_kind, min(due, default=None), now)


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


class DummyBackend(MemoryBackend):
    """Records what it is asked and never runs anything.

    ``jobs`` holds a snapshot of every job it accepted, in enqueue order; ``calls`` holds
    ``(method, args, kwargs)`` for each Backend method called from outside (not ``now``,
    which is a clock read). Claims find nothing, so no handler ever runs; ``claim_or_enqueue``
    only enqueues.
    """

    def __init__(self, *, clock: Clock | None = None, clock_skew_allowance: float = 0.0) -> None:
        super().__init__(clock=clock, clock_skew_allowance=clock_skew_allowance)
        self.jobs: list[Job[Any]] = []
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._depth = threading.local()

    def reset(self) -> None:
        """Forget every job and call."""
        with self._store.lock:
            self.jobs.clear()
            self.calls.clear()
            self._store.clear()

    def _record(
        self, name: str, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        depth: int = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._store.lock:
                self.calls.append((name, args, dict(kwargs)))
        self._depth.n = depth + 1
        try:
            return method(self, *args, **kwargs)
        finally:
            self._depth.n = depth

    def enqueue(self, job: NewJob) -> EnqueueResult:
        with self._store.lock:
            result = super().enqueue(job)
            if result.job_id is not None:
                self.jobs.append(self._store.snapshot(self._store.jobs[result.job_id]))
            return result

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        result = self.enqueue(job)
        return InlineClaimResult(None, result.job_id, result.coalesced)

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        return []

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        return None


# Every public method of the Backend protocol except the clock read.
_RECORDED = tuple(name for name in BACKEND_OPERATIONS if name != "now")


def _recording(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def recorded(self: DummyBackend, *args: Any, **kwargs: Any) -> Any:
        return self._record(name, method, args, kwargs)

    return recorded


for _name in _RECORDED:
    setattr(DummyBackend, _name, _recording(_name, getattr(DummyBackend, _name)))
del _name


class ImmediateBackend(MemoryBackend):
    """A MemoryBackend whose ``immediate`` flag tells JobQueue to run the handler that
    ``queue.process`` registered for the type inside ``enqueue`` itself, so ``enqueue``
    returns only after the job has run. Jobs of a type with no handler wait in memory."""

    immediate = True


if TYPE_CHECKING:

    def _conforms(backend: MemoryBackend) -> Backend:
        return backend
