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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from durabl.model.activity import ActivityRead, ActivityWindow
from durabl.model.clock import Clock, Seconds
from durabl.model.flow import RateLimit
from durabl.model.job import CancelOutcome, FencedWrites, Job, JobHandle, JobResult, LogEntry

# The records a store's own writes take, named here too: every store reads them from here.
from durabl.model.job import Completion as Completion  # noqa: PLC0414 - re-exported
from durabl.model.job import Failure as Failure  # noqa: PLC0414
from durabl.model.job import Release as Release  # noqa: PLC0414
from durabl.model.options import NewJob
from durabl.model.reports import JobEvent, PickupMode, QueueStats, ReapReport
from durabl.model.rules import PRUNE_STATUSES
from durabl.model.schedule import Schedule
from durabl.model.signals import SignalDelivery, StoredSignal
from durabl.model.subscriptions import Subscription
from durabl.model.workers import WorkerInfo


@dataclass(frozen=True)
class EnqueueResult:
    """``job_id`` is None when the dedupe slot was taken (``coalesced`` if the pending
    follower's payload was replaced, ``debounced`` if its ``run_at`` was pushed)."""

    job_id: str | None
    coalesced: bool = False
    debounced: bool = False


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
    """A job store. Thread-safe; synchronous. Stores subclass
    :class:`durabl.stores.engine.StoreBase`, which declares every capability with its
    default and writes the store-neutral operations once. The writes fenced on a claim
    token (and the clock read) are declared by :class:`durabl.model.job.FencedWrites`."""

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
        """Store a pending job; None id when its dedupe slot is taken. Then the pending
        holder of the same type is updated as ``rules.holder_update(job)`` says, in one
        atomic update (its payload replaced, its run_at pushed: ``rules.debounced_run_at``).

        Raises ``DedupeScopeConflictError`` when the key's live job has the other scope.
        """

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """:meth:`enqueue` of each of ``jobs``, in order, with the outcome each would have
        one after the other (a job whose key an earlier job of the batch holds gets no id),
        written in as few operations as the store allows: one per chunk of
        ``BULK_CHUNK`` jobs, a coalescing job alone. ``DedupeScopeConflictError``, nothing
        written, when two jobs give one key different scopes; when a key is live under
        the other scope, the chunk holding it is not written (earlier chunks are)."""

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
        ``search``, the time bounds, ``parent_id``, ``waiting``); a keyword
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

    def set_schedule_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> bool:
        """Pause (or resume) the schedule: no firing's compare-and-set matches a paused one;
        ``next_run_at`` replaces the stored one unless None. False when there is none."""

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

    # -- event subscriptions (the rules are durabl.model.subscriptions'; docs/workflows.md)
    #: True when the store keeps event subscriptions (the four shipped stores do).
    supports_subscriptions: bool

    def upsert_subscriptions(self, subscriptions: Sequence[Subscription]) -> None:
        """Store each subscription not stored yet (those stored are left as they are).
        Idempotent, safe when processes record the same subscriptions at once."""

    def load_subscriptions(self, event: str | None = None) -> list[Subscription]:
        """The stored subscriptions to ``event`` (None: every one), sorted by event and
        type, in one query."""

    def delete_subscription(self, subscription: Subscription) -> bool:
        """Remove the subscription; False when it was not stored."""

    # -- signals (the rules are durabl.model.signals'; the decisions StoreBase's) ---------
    #: True when the store keeps signals with their jobs (the four shipped stores do).
    supports_signals: bool

    def store_signal(self, job_id: str, name: str, data: Any, sent_at: datetime) -> int | None:
        """One atomic write: keep the signal with job ``job_id`` unless the job is unknown
        or terminal (None); its ``seq``, greater than every earlier signal's of the job."""

    def next_signal(self, job_id: str, name: str, after_seq: int) -> StoredSignal | None:
        """The job's first signal ``name`` with a ``seq`` above ``after_seq``; one read."""

    def send_signal(self, job_id: str, name: str, data: Any) -> SignalDelivery | None:
        """Check, store, and wake the job when it waits for ``name`` (``queue.signal``);
        None for an unknown or terminal job."""

    def wake_if_signalled(self, job_id: str, name: str, after_seq: int) -> bool:
        """Make the job due now if a signal ``name`` after ``after_seq`` is stored (the
        second half of a signal wait's suspension); whether it was made due."""

    # -- paused types (durabl.model.pauses): every claim of the store leaves them out ----
    supports_pause: bool

    def pause_type(self, type: str) -> None:
        """Store ``type`` as paused (checked; pausing twice is one pause)."""

    def resume_type(self, type: str) -> bool:
        """Unpause ``type``, telling the store's other processes where it pushes; whether
        it was paused."""

    def paused_types(self) -> list[str]:
        """Every paused type, sorted; one read."""

    def wake_parent(self, parent_id: str) -> Job[Any] | None:
        """Make ``parent_id`` due now when it waits in a gather and none of its children
        is pending or active (once a child ended, or once the parent suspended): the
        parent it woke, else None."""


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
