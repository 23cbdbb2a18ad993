"""The Backend protocol: what a store must do for :class:`durabl.JobQueue`.

A store implements this and passes ``tests/contract``; that suite is the definition of a
backend. Every write after a claim is fenced by the claim token; terminal writes never
overwrite a terminal state and keep a receipt per (claim token, operation), so a write that
is retried after an ambiguous failure reports its first result.
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

from durabl.model.activity import ActivityRead, ActivityWindow
from durabl.model.clock import SYSTEM_CLOCK, Clock, Seconds
from durabl.model.flow import RateLimit, check_rate_limit
from durabl.model.job import (
    CANCELLED,
    CancelOutcome,
    FencedWrites,
    Job,
    JobFilter,
    JobHandle,
    JobResult,
    LogEntry,
    clip_reason,
)

# The records a store's own writes take, named here too: every store reads them from here.
from durabl.model.job import Completion as Completion  # noqa: PLC0414 - re-exported
from durabl.model.job import Failure as Failure  # noqa: PLC0414
from durabl.model.job import Release as Release  # noqa: PLC0414
from durabl.model.options import NewJob, check_job_type
from durabl.model.reports import JobEvent, PickupMode, QueueStats, ReapReport
from durabl.model.rules import (
    PRUNE_STATUSES,
    JobPage,
    check_at_most,
    check_page,
    job_filter,
    job_order,
    prune_selection,
    search_walk,
)
from durabl.model.schedule import Schedule
from durabl.model.workers import WorkerInfo


@dataclass(frozen=True)
class EnqueueResult:
    """``job_id`` is None when the dedupe slot was taken (``coalesced`` if the pending
    follower's payload was replaced)."""

    job_id: str | None
    coalesced: bool = False


class SchemaVersion(NamedTuple):
    """A store's schema version (``current``; 0 where durabl never set up) and the newest
    this release knows (``latest``): ``startup()`` applies the migrations in between."""

    current: int
    latest: int

    @property
    def pending(self) -> bool:
        return self.current < self.latest


@dataclass(frozen=True)
class InlineClaimResult:
    """The outcome of :meth:`Backend.claim_or_enqueue`: a handle, or the job that now covers
    the work (``job_id`` of a new pending follower, or None)."""

    handle: JobHandle[Any] | None
    enqueued_id: str | None = None
    coalesced: bool = False


@runtime_checkable
class Backend(FencedWrites, Protocol):
    """A job store. Thread-safe; synchronous. Stores subclass :class:`StoreBase`, which
    declares every capability with its default and writes the store-neutral operations
    once. The writes fenced on a claim token (and the clock read) are declared by
    :class:`durabl.model.job.FencedWrites`."""

    #: True when the store can hold an orchestration journal on the job.
    supports_journal: bool
    #: True when push pickup (change streams) is active for this store.
    supports_push: bool
    #: True when a queue on this store runs handlers inside ``enqueue`` by default.
    immediate: bool
    #: The clock the store reads time from (leases, due times); the queue uses it too.
    clock: Clock
    #: Seconds of clock difference between processes that the reaper allows for.
    clock_skew_allowance: float

    def push_unavailable(self) -> str | None:
        """Why push pickup cannot run on this store, or None when it can (it starts with
        the first ``process()`` once ``startup()`` verified it)."""

    @abstractmethod
    def startup(self) -> None:
        """Create indexes/schema. Idempotent; safe on a store that already holds jobs."""

    def close(self) -> None:
        """Release connections this backend opened itself."""

    def check_size(self, job: NewJob) -> None:
        """Raise ``DocumentTooLargeError`` when ``job`` cannot be stored."""

    def schema_version(self) -> SchemaVersion | None:
        """The schema version the store holds and the newest this release knows, read
        without changing anything (``durabl migrate --check``); None for a store without
        a versioned schema (its ``startup()`` only ensures indexes, or does nothing)."""

    def pending_setup(self) -> tuple[str, ...]:
        """For a store without a versioned schema: what ``startup()`` would still create
        (MongoDB: the names of its missing indexes), read without changing anything, so
        ``durabl migrate --check`` asks the store rather than assuming."""

    # -- enqueue --------------------------------------------------------------------------
    @abstractmethod
    def enqueue(self, job: NewJob) -> EnqueueResult:
        """Store a pending job; None id when its dedupe slot is taken.

        Raises ``DedupeScopeConflictError`` when the key's live job has the other scope.
        """

    #: True when :meth:`enqueue_through` can insert through a caller's own connection.
    supports_transactional_enqueue: bool

    def enqueue_through(self, job: NewJob, connection: object) -> EnqueueResult:
        """:meth:`enqueue` inside the transaction open on ``connection``, the caller's own
        database connection (``queue.enqueue(..., connection=conn)``): the job exists if
        and only if the caller commits, and nothing can claim it before. A failure inside
        (a scope conflict, a statement error) leaves the caller's transaction usable.
        ``ValueError`` on a store without transactional enqueue."""

    @abstractmethod
    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        """Create the job already claimed when its key allows a run now; else enqueue a
        follower (or coalesce) as :meth:`enqueue` would."""

    # -- claiming -------------------------------------------------------------------------
    def claim(
        self,
        type: str,
        *,
        limit: int = 1,
        lease_owner: str = "",
        starting: int | None = None,
    ) -> list[JobHandle[Any]]:
        """Claim up to ``limit`` due pending jobs of ``type``: lowest priority first, then
        oldest ``run_at``, returned in that order. Each claim gets a fresh token and counts
        an attempt.

        ``starting``: how many of them start at once (None: all). The others are claimed
        ahead of a free worker (read ahead) and stay *reserved* until :meth:`mark_started`
        records that their handler began; the reaper gives back the attempt of a reserved
        job (:func:`durabl.model.rules.reap_decision`).

        A ``limit`` below 1 claims nothing, without asking the store; otherwise the store
        claims through :meth:`claim_due`."""
        if limit <= 0:
            return []
        return self.claim_due(type, limit, lease_owner, starting)

    @abstractmethod
    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        """Claim up to ``limit`` (at least 1) due pending jobs of ``type`` in the order
        :meth:`claim` gives, those past the first ``starting`` reserved (each store's own
        atomic claim; not an operation a caller makes)."""

    @abstractmethod
    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        """Record that the handlers of these reserved claims (``(job_id, token)`` pairs)
        started. Fenced on each token; claims that are no longer held are skipped."""

    @abstractmethod
    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        """Claim the due pending job of ``type`` holding ``dedupe_key``, if any."""

    # -- fenced writes (the rest are :class:`durabl.model.job.FencedWrites`) -------------
    def complete_many(self, completions: Sequence[Completion]) -> list[JobResult]:
        """:meth:`complete` for each of ``completions``, in order, one result each. A store
        may write them together (one transaction); each is still fenced on its own token,
        so one lost lease does not stop the others."""
        return self.write_completions("complete_many", completions) if completions else []

    # -- recovery and operations ----------------------------------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> ReapReport:
        """Recover up to ``limit`` jobs whose lease was not renewed within the timeout."""

    def recover_stuck_jobs(self, visibility_timeout: float) -> int:
        """One sweep; the number of jobs recovered (pending again, stalled or superseded)."""

    @abstractmethod
    def has_outstanding(self, type: str, dedupe_key: str) -> bool: ...

    @abstractmethod
    def get_job(self, job_id: str) -> Job[Any] | None: ...

    def list_jobs(
        self,
        *,
        limit: int = 100,
        offset: int = 0,
        order: str | None = None,
        among_newest: int | None = None,
        **filters: Any,
    ) -> list[Job[Any]]:
        """Jobs newest first (a list of one status: newest finish first), or sorted by
        ``order`` (a field of :data:`durabl.model.rules.JOB_ORDER_FIELDS`, ``"-"`` first
        for descending; equal values newest first). ``filters``: the fields of
        :class:`durabl.model.job.JobFilter` (``status``, ``type``, ``failure_kind``,
        ``search``, the ``created_*``, ``updated_*`` and ``finished_*`` bounds); a keyword
        that is none of them is a ``TypeError``. ``search``: a prefix of the job id or of
        the dedupe key, or text the failure reason contains (literal, case-sensitive).
        ``among_newest``: only the first that many jobs of the list in its own order
        (those a search then matches, sorted by ``order``): a page whose cost is bounded
        by that number, however long the list, for a sort no index serves."""

    def count_jobs(
        self, *, at_most: int | None = None, among_newest: int | None = None, **filters: Any
    ) -> int:
        """How many jobs the :meth:`list_jobs` ``filters`` select; with ``at_most``, no
        more than that: a count that stops there (``at_most`` means "at least that many"),
        for a page that shows "1,000+" instead of counting every match of a broad
        search; ``among_newest``: of the first that many jobs of the list, as
        :meth:`list_jobs` with it."""

    @abstractmethod
    def retry(self, job_id: str) -> bool:
        """failed -> pending with attempts 0, due now. False if the job is not failed, or
        its dedupe key is live under the other scope, or the pending slot it needs is
        taken. (A ``pending``-scope job behind an active run becomes its follower.)"""

    @abstractmethod
    def delete(self, job_id: str) -> bool:
        """Remove a job that is not active; False when absent or active."""

    def retry_matching(self, **filters: Any) -> int:
        """:meth:`retry` every failed job the ``list_jobs`` filters select, in one store
        operation (one transaction on SQL stores), oldest job first; a job whose dedupe key
        is live stays failed. The number retried."""

    def delete_matching(self, **filters: Any) -> int:
        """:meth:`delete` every job the ``list_jobs`` filters select that is not active, in
        one store operation. The number deleted."""

    def cancel_matching(self, *, reason: str | None = None, **filters: Any) -> int:
        """:meth:`cancel` every job the ``list_jobs`` filters select, in one store
        operation (one transaction on SQL stores): pending ones end ``cancelled`` at once
        (dedupe slots freed, ``reason`` kept as ``fail_reason``), active ones not yet asked
        get the request (their next heartbeat answers ``cancel-requested``); terminal jobs
        are untouched. A ``status`` other than ``pending`` or ``active`` is a
        ``ValueError``. The number cancelled or requested."""

    def run_now(self, job_id: str) -> bool:
        """Make a pending job due now: a delayed one's ``run_at`` becomes the store's now
        (behind the jobs already due at its priority); one already due keeps its place.
        False when the job is not pending, or missing."""

    def run_now_matching(self, **filters: Any) -> int:
        """:meth:`run_now` every pending job the ``list_jobs`` filters select, in one store
        operation (a ``status`` other than ``pending`` is a ``ValueError``). The number of
        delayed jobs made due."""

    @abstractmethod
    def get_stats(self, type: str | None = None) -> QueueStats: ...

    @abstractmethod
    def job_types(self) -> list[str]:
        """Every type that has at least one stored job."""

    # -- the admin's overview (the rules are durabl.model.activity's) --------------------
    def stats_by_type(self) -> dict[str, QueueStats]:
        """:meth:`get_stats` of every type that has stored jobs, by type, in one read (one
        pass over the jobs where the store can): what the overview's table shows, its
        total added up by :func:`durabl.model.activity.total_stats`."""

    def read_activity(self, window: ActivityWindow, types: Sequence[str]) -> ActivityRead:
        """What :func:`durabl.model.activity.type_activity` charts for ``types``, in one
        read whose cost is bounded by the jobs that finished in ``window``, not by the
        jobs stored: per type and bucket, how many jobs ended completed and failed (by
        ``finished_at``: bucket ``(finished_ms - since_ms) // width_ms``), and as
        candidates for the lag line the :data:`~durabl.model.activity.PENDING_SCAN`
        pending jobs of each type due earliest (``run_at`` up to ``window.until``), every
        active job claimed since ``window.since``, and every job that finished after the
        first bucket's end and whose ``run_at`` to ``finished_at`` spans a bucket's end
        (:func:`~durabl.model.activity.spans_an_end`)."""

    # -- retention ------------------------------------------------------------------------
    def prune(self, *, older_than: Seconds, statuses: Iterable[str] = PRUNE_STATUSES) -> int:
        """Delete the jobs in ``statuses`` (terminal ones only) that finished more than
        ``older_than`` seconds ago by the store's clock, with their logs: one operation.
        How many were deleted."""

    # -- cancelling -----------------------------------------------------------------------
    def cancel(self, job_id: str, reason: str | None = None) -> CancelOutcome:
        """A pending job becomes ``cancelled`` at once (its dedupe slot freed, ``reason``
        kept as its ``fail_reason``); for an active one, record that cancellation is
        requested: its next heartbeat answers ``cancel-requested`` (and the reaper ends it
        ``cancelled`` if its worker is gone). ``not-cancellable`` for a terminal or missing
        job, or one whose cancellation was already requested."""

    def cancel_run(self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()) -> JobResult:
        """End a claimed run whose cancellation was requested as ``cancelled`` (fenced on
        ``token``, with a receipt as every terminal write)."""

    # -- flow control (the rules are durabl.model.flow's; see docs/flow-control.md) -----
    def set_rate_limit(self, type: str, limit: int | None, per: Seconds | None = None) -> None:
        """Store the rate limit of ``type`` (at most ``limit`` claims in each window of
        ``per`` seconds, aligned to the epoch; every claim counts one start); ``limit``
        None removes it. Checked before anything is written."""

    def get_rate_limit(self, type: str) -> RateLimit | None:
        """The stored rate limit of ``type``, or None."""

    # -- schedules (the rules are durabl.model.schedule's; see docs/schedules.md) ------
    #: True when the store keeps schedules (the four shipped stores do).
    supports_schedules: bool

    def upsert_schedule(self, schedule: Schedule, next_run_at: datetime) -> None:
        """Store ``schedule`` under its name. New, or stored with another definition: store
        it with ``next_run_at`` (state ``last_*`` kept). The same definition: change nothing.
        One atomic statement, so processes declaring the same schedule at once agree."""

    def load_schedules(self) -> list[Schedule]:
        """Every stored schedule, by name: one query (the scheduler's only idle read)."""

    def delete_schedule(self, name: str) -> bool:
        """Remove the schedule; False when there was none."""

    def fire_schedule(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None:
        """Compare-and-set: only if the stored schedule still has ``schedule.next_run_at``
        and ``schedule.definition()``, enqueue ``jobs`` (``(tick, job)`` pairs, as
        :meth:`enqueue` would) and move the schedule to ``next_run_at``, ``last_run_at``
        the last tick, ``last_job_id`` its job — all or nothing. The job ids (None where a
        dedupe slot was taken); None when the compare failed (another process fired it, or
        it was redefined or deleted): nothing was written then."""

    # -- the live workers registry (the rules are durabl.model.workers'; docs/operations.md)
    #: True when the store keeps the workers registry (the four shipped stores do).
    supports_workers: bool

    def upsert_worker(self, info: WorkerInfo) -> None:
        """Store ``info`` under ``info.id``, replacing what was stored (``gone`` is not
        stored). One write: a worker process refreshes its entry with it."""

    def load_workers(self) -> list[WorkerInfo]:
        """Every stored entry (``gone`` False: the caller decides), in one query."""

    def delete_worker(self, worker_id: str) -> bool:
        """Remove the entry; False when there was none."""

    def prune_workers(self, last_seen_before: datetime) -> int:
        """Remove the entries last seen before ``last_seen_before``; how many."""


class ScheduleStore(Protocol):
    """The part of a store that keeps its schedules (:attr:`StoreBase.schedules`): each
    method means what the ``*_schedule`` operation of :class:`Backend` of its name means."""

    def upsert(self, schedule: Schedule, next_run_at: datetime) -> None: ...

    def load(self) -> list[Schedule]: ...

    def delete(self, name: str) -> bool: ...

    def fire(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None: ...


class WorkerRegistry(Protocol):
    """The part of a store that keeps the workers registry (:attr:`StoreBase.workers`):
    each method means what the ``*_worker(s)`` operation of :class:`Backend` means."""

    def upsert(self, info: WorkerInfo) -> None: ...

    def load(self) -> list[WorkerInfo]: ...

    def delete(self, worker_id: str) -> bool: ...

    def prune(self, last_seen_before: datetime) -> int: ...


def cancel_reason(reason: str | None) -> str:
    """The reason a cancellation keeps: ``reason`` clipped to the stored length, or
    ``cancelled``; ``TypeError`` for anything but text or None."""
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"reason must be a str or None, got {type(reason).__name__}")
    return clip_reason(reason) if reason else CANCELLED


P = TypeVar("P")


class StoreBase(Backend):
    """The base of every store: each capability declared with its default, and the
    operations that are the same on every store written here once. A store overrides a
    capability by assigning it (on the class, or per instance after ``startup()``)."""

    supports_journal: bool = False
    supports_push: bool = False
    immediate: bool = False
    clock: Clock = SYSTEM_CLOCK
    clock_skew_allowance: float = 0.0

    def push_unavailable(self) -> str | None:
        return f"{type(self).__name__} has no push pickup"

    def close(self) -> None:
        """Nothing to release unless the store opened connections itself."""

    def check_size(self, job: NewJob) -> None:
        """Nothing beyond the shared payload budget that ``build_new_job`` applied."""

    def schema_version(self) -> SchemaVersion | None:
        """No versioned schema unless the store says otherwise."""
        return None

    def pending_setup(self) -> tuple[str, ...]:
        """Nothing to create unless the store says otherwise."""
        return ()

    # -- transactional enqueue: a store that can sets the flag and writes the insert -----
    supports_transactional_enqueue: bool = False

    def enqueue_through(self, job: NewJob, connection: object) -> EnqueueResult:
        """See :meth:`Backend.enqueue_through`: refused here, once, for every store that
        does not declare the capability; the others insert through
        :meth:`insert_through`."""
        if not self.supports_transactional_enqueue:
            raise ValueError(
                f"enqueue(connection=...) needs a store with transactional enqueue "
                f"(PostgresJobQueue); {type(self).__name__} has none"
            )
        return self.insert_through(job, connection)

    def insert_through(self, job: NewJob, connection: object) -> EnqueueResult:
        """Store ``job`` as :meth:`enqueue` would, through ``connection`` and inside the
        transaction open on it (check the connection: a wrong type is a ``TypeError``, a
        closed or unusable one a ``ValueError``)."""
        raise NotImplementedError(f"{type(self).__name__} declares no transactional enqueue")

    # -- flow control: the checks once; each store keeps the limit (and counts claims) --
    def set_rate_limit(self, type: str, limit: int | None, per: Seconds | None = None) -> None:
        """See :meth:`Backend.set_rate_limit`."""
        check_job_type(type)
        self.write_rate_limit(type, check_rate_limit(limit, per))

    def get_rate_limit(self, type: str) -> RateLimit | None:
        """See :meth:`Backend.get_rate_limit`."""
        check_job_type(type)
        return self.read_rate_limit(type)

    @abstractmethod
    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        """Store (None: remove) the checked rate limit of ``type``. Claims of the type
        then start at most ``rate.limit`` jobs per window, counted atomically with the
        claim across processes, with no write while the window is full."""

    @abstractmethod
    def read_rate_limit(self, type: str) -> RateLimit | None:
        """The stored rate limit of ``type``."""

    # -- schedules: a store that keeps them sets the flag and either gives the part that
    # keeps them (``schedules``) or overrides these four ----------------------------------
    supports_schedules: bool = False
    schedules: ScheduleStore | None = None

    def _schedule_store(self) -> ScheduleStore:
        return self._part(self.schedules, "does not keep schedules")

    def upsert_schedule(self, schedule: Schedule, next_run_at: datetime) -> None:
        self._schedule_store().upsert(schedule, next_run_at)

    def load_schedules(self) -> list[Schedule]:
        return self._schedule_store().load()

    def delete_schedule(self, name: str) -> bool:
        return self._schedule_store().delete(name)

    def fire_schedule(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None:
        return self._schedule_store().fire(schedule, next_run_at, jobs)

    # -- workers registry: as schedules, the flag and the part (``workers``) or overrides
    supports_workers: bool = False
    workers: WorkerRegistry | None = None

    def _worker_registry(self) -> WorkerRegistry:
        return self._part(self.workers, "does not keep a workers registry")

    def _part(self, part: P | None, missing: str) -> P:
        """``part`` of this store; ``NotImplementedError`` (the store ``missing`` it) when
        the store has none."""
        if part is None:
            raise NotImplementedError(f"{type(self).__name__} {missing}")
        return part

    def upsert_worker(self, info: WorkerInfo) -> None:
        self._worker_registry().upsert(info)

    def load_workers(self) -> list[WorkerInfo]:
        return self._worker_registry().load()

    def delete_worker(self, worker_id: str) -> bool:
        return self._worker_registry().delete(worker_id)

    def prune_workers(self, last_seen_before: datetime) -> int:
        return self._worker_registry().prune(last_seen_before)

    # -- retention: the arguments checked once; each store deletes in one operation -------
    def prune(self, *, older_than: Seconds, statuses: Iterable[str] = PRUNE_STATUSES) -> int:
        """See :meth:`Backend.prune`."""
        age, chosen = prune_selection(older_than, statuses)
        return self.delete_finished(age, chosen)

    @abstractmethod
    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        """Delete, in one operation, the jobs in ``statuses`` (checked: terminal ones)
        whose ``finished_at`` is more than ``older_than`` seconds (positive) before the
        store's now; the number deleted."""

    # -- cancelling: the reason clipped once; each store moves the job atomically ---------
    def cancel(self, job_id: str, reason: str | None = None) -> CancelOutcome:
        """See :meth:`Backend.cancel`."""
        return self.write_cancel(job_id, cancel_reason(reason))

    def cancel_run(self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()) -> JobResult:
        """See :meth:`Backend.cancel_run`."""
        return self.write_cancelled_run(job_id, token, logs)

    @abstractmethod
    def write_cancel(self, job_id: str, reason: str) -> CancelOutcome:
        """Pending: ``cancelled`` now, slots freed, ``fail_reason`` ``reason``. Active with
        no request yet: keep ``reason`` as the request (``requested``). One atomic
        statement per case; anything else ``not-cancellable``, nothing written."""

    @abstractmethod
    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        """End the claim ``token`` holds as ``cancelled`` (receipt ``cancel``), its
        ``fail_reason`` the requested reason, the attempt's outcome ``cancelled``."""

    @abstractmethod
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> ReapReport:
        """See :meth:`Backend.reap`."""

    def list_jobs(
        self,
        *,
        limit: int = 100,
        offset: int = 0,
        order: str | None = None,
        among_newest: int | None = None,
        **filters: Any,
    ) -> list[Job[Any]]:
        """See :meth:`Backend.list_jobs` (``filters``: the keywords it names). The filters,
        the page and the order are checked here, once; the store answers through
        :meth:`find_jobs`."""
        selection = job_filter(filters)
        check_page(limit, offset)
        sort = job_order(order)
        check_at_most(among_newest, "among_newest")
        if among_newest is not None:
            return self.find_jobs(selection, JobPage(limit, offset, sort, newest=among_newest))
        if selection.search and sort is None and limit:
            # A broad search fills its page from the newest jobs of the list (search_walk);
            # a page that is not full there may have matches further back: the probes.
            walk = search_walk(offset + limit)
            page = self.find_jobs(selection, JobPage(limit, offset, newest=walk))
            if len(page) == limit:
                return page
        return self.find_jobs(selection, JobPage(limit, offset, sort))

    def count_jobs(
        self, *, at_most: int | None = None, among_newest: int | None = None, **filters: Any
    ) -> int:
        """See :meth:`Backend.count_jobs`: checked as :meth:`list_jobs`; the store answers
        through :meth:`count_matching`."""
        check_at_most(at_most)
        check_at_most(among_newest, "among_newest")
        selection = job_filter(filters)
        if among_newest is not None:
            return self.count_matching(selection, at_most=at_most, newest=among_newest)
        if selection.search and at_most is not None:
            # A count that stops at ``at_most`` stops among the newest jobs of a list when
            # the search is broad: a short walk first, a longer one when the short one's
            # matches promise enough, else the probes count what they find.
            short, long = search_walk(0), search_walk(at_most)
            found = self.count_matching(selection, at_most=at_most, newest=short)
            if found < at_most and long > short and found * long >= at_most * short:
                found = self.count_matching(selection, at_most=at_most, newest=long)
            if found >= at_most:
                return at_most
        return self.count_matching(selection, at_most=at_most)

    @abstractmethod
    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        """The jobs ``filters`` selects, newest first (``status="failed"``: newest failure
        first) unless ``page.order`` sorts them (ties newest first), the ``page`` of them
        (see :class:`~durabl.model.rules.JobPage`). All were checked, and the filter's
        status and failure kind are known ones. ``filters.search`` matches a job whose id
        or dedupe key starts with it, or whose failure reason contains it (byte for byte:
        no wildcards, no case folding)."""

    # -- bulk operations: checked here once, each store writes them in one operation -----
    def retry_matching(self, **filters: Any) -> int:
        """See :meth:`Backend.retry_matching`: the filters checked as :meth:`list_jobs`
        checks them (a status other than ``failed`` is a ``ValueError``); the store retries
        through :meth:`retry_selected`."""
        selection = job_filter(filters)
        if selection.status not in (None, "failed"):
            raise ValueError(f"retry_matching retries failed jobs, not {selection.status!r}")
        return self.retry_selected(replace(selection, status="failed"))

    def delete_matching(self, **filters: Any) -> int:
        """See :meth:`Backend.delete_matching`: checked as :meth:`list_jobs`; a status of
        ``active`` is a ``ValueError`` (running jobs are never deleted). The store deletes
        through :meth:`delete_selected`."""
        selection = job_filter(filters)
        if selection.status == "active":
            raise ValueError("delete_matching never deletes active jobs")
        return self.delete_selected(selection)

    @abstractmethod
    def retry_selected(self, filters: JobFilter) -> int:
        """Retry, as :meth:`Backend.retry` would one by one, every failed job ``filters``
        selects (its status is ``failed``), oldest first, in one operation (one transaction
        where the store has them): a job whose dedupe key is live stays failed. How many
        were retried."""

    @abstractmethod
    def delete_selected(self, filters: JobFilter) -> int:
        """Delete every job ``filters`` selects that is not active, in one operation; how
        many were deleted."""

    def cancel_matching(self, *, reason: str | None = None, **filters: Any) -> int:
        """See :meth:`Backend.cancel_matching`: checked as :meth:`list_jobs` (a terminal
        status is a ``ValueError``), the reason as :meth:`cancel` checks it; the store
        cancels through :meth:`cancel_selected`."""
        selection = job_filter(filters)
        if selection.status not in (None, "pending", "active"):
            raise ValueError(
                f"cancel_matching cancels pending or active jobs, not {selection.status!r}"
            )
        return self.cancel_selected(selection, cancel_reason(reason))

    def run_now_matching(self, **filters: Any) -> int:
        """See :meth:`Backend.run_now_matching`: checked as :meth:`list_jobs` (a status
        other than ``pending`` is a ``ValueError``); the store writes through
        :meth:`run_now_selected`."""
        selection = job_filter(filters)
        if selection.status not in (None, "pending"):
            raise ValueError(f"run_now_matching moves pending jobs, not {selection.status!r}")
        return self.run_now_selected(replace(selection, status="pending"))

    @abstractmethod
    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        """As :meth:`write_cancel` one by one, in one operation: every pending job
        ``filters`` selects ``cancelled`` (``fail_reason`` ``reason``), every active one
        with no request yet requested (``reason``); how many of both."""

    @abstractmethod
    def run_now(self, job_id: str) -> bool:
        """See :meth:`Backend.run_now`: one atomic statement of the store."""

    @abstractmethod
    def run_now_selected(self, filters: JobFilter) -> int:
        """Set ``run_at`` (and ``updated_at``) to the store's now on every job ``filters``
        selects (its status is ``pending``) whose ``run_at`` is later, in one operation;
        how many."""

    @abstractmethod
    def stats_by_type(self) -> dict[str, QueueStats]:
        """See :meth:`Backend.stats_by_type`."""

    def read_activity(self, window: ActivityWindow, types: Sequence[str]) -> ActivityRead:
        """See :meth:`Backend.read_activity`: ``types`` checked here (no duplicates kept);
        none reads nothing; the store reads through :meth:`find_activity`."""
        if isinstance(types, str):
            raise TypeError("read_activity takes a sequence of job types, not one str")
        chosen = tuple(dict.fromkeys(check_job_type(t) for t in types))
        return self.find_activity(window, chosen) if chosen else ActivityRead()

    @abstractmethod
    def find_activity(self, window: ActivityWindow, types: tuple[str, ...]) -> ActivityRead:
        """:meth:`Backend.read_activity` for ``types`` (at least one, checked)."""

    @abstractmethod
    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        """How many jobs ``filters`` selects (for :meth:`count_jobs`, as :meth:`find_jobs`
        is for :meth:`list_jobs`), counting no further than ``at_most``; ``newest``: among
        that many jobs only, as :meth:`find_jobs` takes it."""

    def recover_stuck_jobs(self, visibility_timeout: float) -> int:
        """Sweep until nothing expired is left: the number of jobs recovered (pending
        again, stalled or superseded)."""
        total = 0
        while True:
            report = self.reap(visibility_timeout)
            total += report.handled
            if not report.saturated or not report.handled:
                return total


ClaimSource = Literal["poll", "inline", "drain"]


# -- push pickup (optional) ---------------------------------------------------------------
@dataclass(frozen=True)
class PushStatus:
    """A push watcher's view of pickup: ``pickup`` and why (``reason``), plus counters."""

    pickup: PickupMode
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


class PushListener(Protocol):
    """What a push watcher calls back into: the queue whose processors it wakes."""

    def push_types(self) -> frozenset[str]:
        """The job types this process runs worker threads for."""

    def push_due(self, type: str, count: int) -> None:
        """``count`` jobs of ``type`` may be claimable now (0: poll every free slot)."""

    def push_mode(self, mode: PickupMode, reason: str) -> None:
        """Pickup is now ``mode``; processors on the default interval follow it."""

    def push_closing(self) -> bool:
        """True once the queue shuts down: the watcher then stops by itself."""

    def emit(self, event: JobEvent) -> None:
        """Send a ``changestream-*`` event to the queue's sink."""


class PushWatcher(Protocol):
    """A background watcher started by the queue (one thread) and stopped on shutdown."""

    def start(self) -> None: ...

    def stop(self, timeout: float) -> bool:
        """Stop and join for at most ``timeout`` seconds; True when the thread ended."""

    def status(self) -> PushStatus: ...


@runtime_checkable
class PushSource(Protocol):
    """An optional extra a store may offer: tell the queue when jobs may have become
    claimable, so workers need not poll often. Only ``MongoJobQueue`` (change streams)
    implements it; every other store polls, and the contract suite does not need it."""

    #: True once ``startup()`` verified that push pickup can work.
    supports_push: bool
    #: The poll interval of default-interval processors while push pickup is up.
    safety_poll_interval: float

    def open_push(self, listener: PushListener) -> PushWatcher:
        """A watcher, not started, that reports to ``listener``."""


def protocol_operations(protocol: type) -> tuple[str, ...]:
    """The public methods ``protocol`` declares, its base protocols' included, in
    declaration order: what a stand-in for a store (recording or refusing) wraps."""
    names: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        if cls is object or not getattr(cls, "_is_protocol", False):
            continue
        for name, value in vars(cls).items():
            if inspect.isfunction(value) and not name.startswith("_") and name not in STORE_STEPS:
                names[name] = None
    return tuple(names)


#: Methods of the protocols that are a store's own steps behind an operation (the
#: operation calls them), not operations a caller makes.
STORE_STEPS = frozenset({"claim_due", "write_completions", "write_failure", "write_release"})


#: Every operation of :class:`Backend`, the fenced writes included.
BACKEND_OPERATIONS = protocol_operations(Backend)
