"""The store-neutral half of every store, written once above them: :class:`StoreBase`
declares each capability with its default and writes the operations that are the same on
every store (argument checks, list and count strategies, bulk-operation rules, retention,
cancellation reasons, rate-limit checks, the schedule and worker parts); a store writes only
what must be atomic in its own database (the abstract methods, specified by
:class:`durabl.stores.base.Backend`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from durabl.model.activity import ActivityRead, ActivityWindow
from durabl.model.bulk import BULK_CHUNK, check_batch_scopes
from durabl.model.clock import SYSTEM_CLOCK, Clock, Seconds
from durabl.model.flow import RateLimit, check_rate_limit
from durabl.model.job import (
    CANCELLED,
    CancelOutcome,
    Job,
    JobFilter,
    JobResult,
    LogEntry,
    clip_reason,
)
from durabl.model.options import NewJob, check_job_type
from durabl.model.reports import QueueStats, ReapReport
from durabl.model.rules import (
    PRUNE_STATUSES,
    JobPage,
    check_at_most,
    check_page,
    holder_update,
    job_filter,
    job_order,
    prune_selection,
    search_walk,
)
from durabl.stores.base import EnqueueResult, SchemaVersion
from durabl.stores.family import StoreFamily
from durabl.stores.waiting import check_not_bulk, count_waiting, find_waiting

#: The outcome of a job whose dedupe slot is taken (and that coalesces nothing).
SLOT_TAKEN = EnqueueResult(None)


def cancel_reason(reason: str | None) -> str:
    """The reason a cancellation keeps: ``reason`` clipped to the stored length, or
    ``cancelled``; ``TypeError`` for anything but text or None."""
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"reason must be a str or None, got {type(reason).__name__}")
    return clip_reason(reason) if reason else CANCELLED


class StoreBase(StoreFamily):
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

    # -- bulk enqueue: the batch's flow once; each store inserts a chunk in one operation --
    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """See :meth:`Backend.enqueue_many`. Written once: the scopes checked, the jobs
        whose key an earlier job of the batch holds answered here (None), every other job
        sent in chunks of up to ``BULK_CHUNK`` through :meth:`insert_many`, and a job
        that coalesces or debounces through :meth:`enqueue` at its place in the order
        (its update of the pending job holding its key is a second write an insert
        cannot say)."""
        check_batch_scopes(jobs)
        results: list[EnqueueResult] = [SLOT_TAKEN] * len(jobs)
        held: set[str] = set()  # the keys an earlier job of the batch holds
        chunk: list[int] = []  # positions waiting for the next insert_many

        def flush() -> None:
            if chunk:
                ids = self.insert_many([jobs[i] for i in chunk])
                for position, job_id in zip(chunk, ids, strict=True):
                    results[position] = EnqueueResult(job_id)
                chunk.clear()

        for position, job in enumerate(jobs):
            key = job.dedupe_key
            if holder_update(job) is not None:
                flush()  # the jobs before it first: it may update one of them
                results[position] = self.enqueue(job)
            elif key is None or key not in held:
                chunk.append(position)
                if len(chunk) == BULK_CHUNK:
                    flush()
            if key is not None:
                held.add(key)
        flush()
        return results

    @abstractmethod
    def insert_many(self, jobs: Sequence[NewJob]) -> list[str | None]:
        """Store ``jobs`` (1 to ``BULK_CHUNK``; none updates a holder, no two share a key)
        as :meth:`enqueue` would each, in one operation of the store: the id of each, in
        order, or None where its dedupe slot is taken. ``DedupeScopeConflictError`` when a
        key is live under the other scope, none of them kept. Push pickup hears of the
        chunk once."""

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
        """See :meth:`Backend.cancel`. A parent's live children are cancelled with it
        (:meth:`cancel_children`); a child cancelled while pending may be the last its
        waiting parent waited for (:meth:`child_cancelled`)."""
        kept = cancel_reason(reason)
        outcome = self.write_cancel(job_id, kept)
        if outcome != "not-cancellable":
            self.cancel_children(job_id, kept)
        if outcome == "cancelled":
            self.child_cancelled(job_id)
        return outcome

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
        if selection.waiting is not None:  # the store's candidates, kept here exactly
            wanted = JobPage(limit, offset, sort, newest=among_newest)
            return find_waiting(self.find_jobs, selection, wanted, self.now())
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
        if selection.waiting is not None:  # the store's candidates, kept here exactly

            def count(selected: JobFilter, most: int | None) -> int:
                return self.count_matching(selected, at_most=most)

            now = self.now()
            return count_waiting(
                self.find_jobs, count, selection, now, at_most=at_most, newest=among_newest
            )
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
        check_not_bulk(selection, "retry_matching")
        if selection.status not in (None, "failed"):
            raise ValueError(f"retry_matching retries failed jobs, not {selection.status!r}")
        return self.retry_selected(replace(selection, status="failed"))

    def delete_matching(self, **filters: Any) -> int:
        """See :meth:`Backend.delete_matching`: checked as :meth:`list_jobs`; a status of
        ``active`` is a ``ValueError`` (running jobs are never deleted). The store deletes
        through :meth:`delete_selected`."""
        selection = job_filter(filters)
        check_not_bulk(selection, "delete_matching")
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
        cancels through :meth:`cancel_selected`, and parents and children are treated as
        :meth:`cancel` treats them (:meth:`cancel_selected_families`, which says what
        that costs: two reads more, not one per job)."""
        selection = job_filter(filters)
        check_not_bulk(selection, "cancel_matching")
        if selection.status not in (None, "pending", "active"):
            raise ValueError(
                f"cancel_matching cancels pending or active jobs, not {selection.status!r}"
            )
        return self.cancel_selected_families(selection, cancel_reason(reason))

    def run_now_matching(self, **filters: Any) -> int:
        """See :meth:`Backend.run_now_matching`: checked as :meth:`list_jobs` (a status
        other than ``pending`` is a ``ValueError``); the store writes through
        :meth:`run_now_selected`."""
        selection = job_filter(filters)
        check_not_bulk(selection, "run_now_matching")
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
