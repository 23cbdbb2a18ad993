"""The in-process backend, MemoryBackend (its test doubles are in :mod:`.doubles`).

They keep the observable semantics of :class:`durabl.MongoJobQueue` (dedupe slots, fencing,
receipts, reaping) with nothing but dicts and one lock, so tests and small tools can run a
real :class:`durabl.JobQueue` without a database. The records and dedupe slots they keep
are in :mod:`durabl.stores.memory.store`; this module holds the Backend methods over them.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from durabl.model import activity, rules
from durabl.model import job as model
from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.flow import RateLimit
from durabl.model.job import Job, JobFilter, JobHandle, JobResult, LogEntry, ResultStatus
from durabl.model.options import NewJob
from durabl.model.payload import portable, to_millis
from durabl.model.reports import QueueStats, ReapReport
from durabl.stores import base
from durabl.stores.base import EnqueueResult, InlineClaimResult
from durabl.stores.engine import StoreBase
from durabl.stores.memory.pauses import MemoryPauses
from durabl.stores.memory.schedules import MemorySchedules
from durabl.stores.memory.signals import MemorySignals
from durabl.stores.memory.store import MemoryStore, Record, stats
from durabl.stores.memory.subscriptions import MemorySubscriptions
from durabl.stores.memory.workers import MemoryWorkers

__all__ = ["MemoryBackend"]

#: A fenced write's change to the record its claim holds, at ``now``: the receipt's result.
Write = Callable[[Record, datetime], ResultStatus]


class MemoryBackend(StoreBase):
    """Jobs in a dict, guarded by one re-entrant lock. Nothing survives the process.

    ``clock_skew_allowance`` (seconds) is added to the reaper's cutoff like MongoJobQueue's;
    it defaults to 0 here since one process has one clock. The records and slots are a
    :class:`~durabl.stores.memory.store.MemoryStore` this backend owns.
    """

    supports_journal: bool = True
    supports_schedules: bool = True
    supports_workers: bool = True
    supports_subscriptions: bool = True
    supports_signals: bool = True
    supports_pause: bool = True
    pauses: MemoryPauses

    def __init__(self, *, clock: Clock | None = None, clock_skew_allowance: float = 0.0) -> None:
        self.clock = clock or SYSTEM_CLOCK
        self.clock_skew_allowance = float(clock_skew_allowance)
        self._store = MemoryStore()
        self._rates: dict[str, RateLimit] = {}
        #: type -> (the window's start in epoch milliseconds, the claims counted in it)
        self._starts: dict[str, tuple[int, int]] = {}
        self.schedules = MemorySchedules(
            self._store.lock, lambda job: self._enqueue(job, self.now())
        )
        self.workers = MemoryWorkers(self._store.lock)
        self.subscriptions = MemorySubscriptions(self._store.lock)
        self.signals = MemorySignals(self._store.lock, self._store.jobs)
        self.pauses = MemoryPauses(self._store.lock)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(jobs={len(self._store.jobs)})"

    def startup(self) -> None:
        """Nothing to create."""

    def now(self) -> datetime:
        return to_millis(self.clock.now())

    # -- enqueue and claims ---------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        with self._store.lock:
            return self._enqueue(job, self.now())

    def _enqueue(self, job: NewJob, now: datetime) -> EnqueueResult:
        key = job.dedupe_key
        if key is not None:
            other = self._store.other_scope(key, job.dedupe_scope)
            if other is not None:
                raise DedupeScopeConflictError(key, job.dedupe_scope, other)
            slots = self._store.pending_slots(job.dedupe_scope)
            if key in slots:  # taken; coalesce or debounce update a pending holder of the type
                holder = self._store.jobs[slots[key]]
                pending_of_type = holder.status == "pending" and holder.type == job.type
                update = rules.holder_update(job)
                if update is None or not pending_of_type:
                    return EnqueueResult(None)
                if update.replace_data:
                    holder.data = portable(job.data)
                holder.run_at = to_millis(
                    rules.debounced_run_at(update, holder.run_at, holder.created_at)
                )
                holder.updated_at = now
                return EnqueueResult(
                    None, coalesced=update.replace_data, debounced=update.push_to is not None
                )
        return EnqueueResult(self._store.add(job, now).id)

    def insert_many(self, jobs: Sequence[NewJob]) -> list[str | None]:
        """Under the one lock: every key's scope checked first, so a conflict keeps none."""
        with self._store.lock:
            self._store.check_scopes(jobs)
            now = self.now()
            return [self._enqueue(job, now).job_id for job in jobs]

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        """Enqueue, then claim at once: under the one lock no one sees the job pending."""
        with self._store.lock:
            now = self.now()
            enqueued = self._enqueue(job, now)
            if enqueued.job_id is None:
                return InlineClaimResult(None, None, enqueued.coalesced)
            rec = self._store.jobs[enqueued.job_id]
            handle = self._claim(rec, now, lease_owner, self._store.active_per_key())
            if handle is None:  # a follower of the active run, its key has its limit, or paused
                return InlineClaimResult(None, rec.id)
            return InlineClaimResult(handle)

    def _claim(
        self, rec: Record, now: datetime, owner: str, active: Counter[str], reserve: bool = False
    ) -> JobHandle[Any] | None:
        """Claim ``rec`` unless its type is paused, it follows an active run of its key (the
        active slot is held) or its concurrency key has its limit of ``active`` jobs."""
        if rec.type in self.pauses.types:
            return None
        if not self._store.can_move(rec, "active") or not self._store.key_allows(rec, active):
            return None
        self._store.move(rec, "active", now)
        rec.attempts += 1
        rec.reserved = reserve
        rec.claim_token = token = uuid.uuid4().hex
        rec.heartbeat_at = rec.claimed_at = now
        rec.lease_owner = owner
        return model.handle_for(self._store.snapshot(rec), token, self)

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        with self._store.lock:
            now = self.now()
            rate = self._rates.get(type)
            if rate is not None:
                limit = min(limit, rate.allowance(self._started(type, rate, now)))
            due = [
                r
                for r in self._store.jobs.values()
                if r.status == "pending" and r.type == type and r.run_at <= now
            ]
            active = self._store.active_per_key()
            claimed: list[JobHandle[Any]] = []
            for rec in sorted(due, key=Record.order):
                if len(claimed) >= limit:
                    break
                reserve = starting is not None and len(claimed) >= starting
                handle = self._claim(rec, now, lease_owner, active, reserve)
                if handle is not None:
                    claimed.append(handle)
            if rate is not None and claimed:
                started = self._started(type, rate, now) + len(claimed)
                self._starts[type] = (rate.window_of(_millis(now)), started)
            return claimed

    def _started(self, type: str, rate: RateLimit, now: datetime) -> int:
        """How many jobs of ``type`` the window of ``rate`` holding ``now`` started."""
        window, started = self._starts.get(type, (0, 0))
        return rate.started_in(window, started, _millis(now))

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
                rec = self._store.claimed(job_id, token)
                if rec is not None:
                    rec.reserved = False

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        with self._store.lock:
            now = self.now()
            holders = self._store.holders(dedupe_key, self._store.pending, self._store.live)
            due = [
                r for r in holders if r.status == "pending" and r.type == type and r.run_at <= now
            ]
            if not due:
                return None
            rec = min(due, key=Record.order)
            return self._claim(rec, now, lease_owner, self._store.active_per_key())

    # -- fenced writes --------------------------------------------------------------------
    def _fenced(
        self, op: str, job_id: str, token: str, logs: Sequence[LogEntry], write: Write
    ) -> JobResult:
        """``write`` the record while ``token`` holds its claim, keeping the run's ``logs``
        and the write's receipt; else why the write missed."""
        with self._store.lock:
            rec = self._store.claimed(job_id, token)
            if rec is None:
                return self._store.missed(job_id, token, op)
            result = write(rec, self.now())
            self._store.add_logs(rec, logs)
            rec.receipts.append((token, op, result))
            return JobResult(result)

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> model.HeartbeatResult:
        with self._store.lock:
            rec = self._store.claimed(job_id, token)
            if rec is None:
                return rules.heartbeat_answer(held=False, cancel_requested=False)
            rec.heartbeat_at = self.now()
            self._store.add_logs(rec, logs)
            return rules.heartbeat_answer(True, rec.cancel_requested is not None)

    def write_completions(self, op: str, completions: Sequence[base.Completion]) -> list[JobResult]:
        with self._store.lock:
            return [
                self._fenced(
                    "complete", c.job_id, c.token, c.logs, partial(self._store.completed, c)
                )
                for c in completions
            ]

    def write_cancel(self, job_id: str, reason: str) -> model.CancelOutcome:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is not None and rec.status == "pending":
                self._store.move(rec, "cancelled", self.now())
                rec.fail_reason = reason
                return "cancelled"
            if rec is not None and rec.status == "active" and rec.cancel_requested is None:
                rec.cancel_requested = reason
                return "requested"
            return "not-cancellable"

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        return self._fenced("cancel", job_id, token, logs, self._store.cancelled)

    def write_failure(
        self, job_id: str, token: str, failure: base.Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        return self._fenced(failure.op, job_id, token, logs, partial(self._store.failed, failure))

    def write_release(
        self, job_id: str, token: str, release: base.Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        """The timeout needs no bound here: a memory write never blocks for long."""
        return self._fenced("release", job_id, token, logs, partial(self._store.released, release))

    def append_journal(
        self, job_id: str, token: str, records: Sequence[model.JournalRecord], *, position: int
    ) -> model.JournalAppendResult:
        with self._store.lock:
            rec = self._store.claimed(job_id, token)
            if rec is None:
                return "lease-lost"
            if len(rec.journal) == position:
                rec.journal.extend(portable(dict(r)) for r in records)
                return "applied"
            held = rules.journal_holds_append(len(rec.journal), position, len(records))
            return "applied" if held else "lease-lost"

    # -- recovery -------------------------------------------------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> ReapReport:
        with self._store.lock:
            now = self.now()
            cutoff = now - timedelta(seconds=visibility_timeout + self.clock_skew_allowance)
            stuck = [
                r
                for r in self._store.jobs.values()
                if r.status == "active" and r.heartbeat_at is not None and r.heartbeat_at < cutoff
            ]
            stuck.sort(key=lambda r: (r.heartbeat_at or now, r.seq))
            if limit:  # as Mongo's cursor limit: 0 means no limit
                stuck = stuck[: abs(limit)]
            tally = rules.ReapTally()
            for rec in stuck:
                tally.add(rec.id, self._store.reaped(rec, now))
            return tally.report(saturated=len(stuck) >= limit)

    # -- queries and operations -----------------------------------------------------------
    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        with self._store.lock:
            slots = (self._store.live, self._store.pending, self._store.active)
            return any(rec.type == type for rec in self._store.holders(dedupe_key, *slots))

    def get_job(self, job_id: str) -> Job[Any] | None:
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            return self._store.snapshot(rec) if rec is not None else None

    def find_jobs(self, filters: JobFilter, page: rules.JobPage) -> list[Job[Any]]:
        limit, offset = page.limit, page.offset
        with self._store.lock:
            rows = self._store.selected(filters, page.order, page.newest)
            rows = rows[offset : offset + limit] if limit else rows[offset:]
            return [self._store.snapshot(r) for r in rows]

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        with self._store.lock:
            found = len(self._store.selected(filters, None, newest))
        return found if at_most is None else min(found, at_most)

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
        with self._store.lock:
            rec = self._store.jobs.get(job_id)
            if rec is None or rec.status != "failed" or not self._store.can_move(rec, "pending"):
                return False
            key = rec.dedupe_key
            if key is not None and self._store.other_scope(key, rec.dedupe_scope) is not None:
                return False
            now = self.now()
            self._store.move(rec, "pending", now)
            rec.attempts = 0
            rec.run_at = now
            rec.failure_kind = None
            rec.finished_at = None
            return True

    def retry_selected(self, filters: JobFilter) -> int:
        with self._store.lock:
            records = sorted(self._store.select(filters), key=lambda r: r.seq)
            return sum(self.retry(rec.id) for rec in records)

    def delete_selected(self, filters: JobFilter) -> int:
        with self._store.lock:
            return sum(self.delete(rec.id) for rec in self._store.select(filters))

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
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

    def _due_now(self, records: Iterable[Record]) -> int:
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

    def get_stats(self, type: str | None = None) -> QueueStats:
        with self._store.lock:
            rows = [r for r in self._store.jobs.values() if type is None or r.type == type]
            return stats(rows, self.now())

    def job_types(self) -> list[str]:
        with self._store.lock:
            return sorted({r.type for r in self._store.jobs.values()})

    def stats_by_type(self) -> dict[str, QueueStats]:
        with self._store.lock:
            now = self.now()
            by_type: dict[str, list[Record]] = {}
            for rec in self._store.jobs.values():
                by_type.setdefault(rec.type, []).append(rec)
            return {t: stats(by_type[t], now) for t in sorted(by_type)}

    def find_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        with self._store.lock:
            return self._store.find_activity(window, types)


def _millis(now: datetime) -> int:
    """``now`` (whole milliseconds) in epoch milliseconds."""
    return round(now.timestamp() * 1000)


if TYPE_CHECKING:

    def _conforms(backend: MemoryBackend) -> base.Backend:
        return backend
