"""The operator side of a queue: reads and bulk changes that go to the store as one
operation each (``list_jobs``, ``retry``, ``cancel_matching``, ``prune``, rate limits,
...; the stats, with the pauses, are :mod:`durabl.runtime.controls`').
:class:`QueueOperations` is a base class of :class:`durabl.JobQueue`: its methods are the
queue's own."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from durabl.model.activity import ActivityWindow, TypeActivity, type_activity
from durabl.model.clock import Seconds
from durabl.model.flow import RateLimit
from durabl.model.job import FailureKind, Job, with_lease
from durabl.model.rules import PRUNE_STATUSES
from durabl.runtime.waiting import wait_terminal
from durabl.runtime.worker import Processors
from durabl.stores.base import Backend


class QueueOperations:
    """The store operations of a :class:`durabl.JobQueue`. Uses the queue's started store
    (``_ready()``), its processors (told of jobs made due) and its visibility timeout (the
    lease shown on active jobs)."""

    visibility_timeout: float
    _processors: Processors

    def _ready(self) -> Backend:
        raise NotImplementedError

    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        """Advisory: whether a pending or active job of ``type`` holds ``dedupe_key``."""
        return self._ready().has_outstanding(type, dedupe_key)

    def get_job(self, job_id: str) -> Job[Any] | None:
        """The job, or None; an active one with its ``lease_expires_at``."""
        job = self._ready().get_job(job_id)
        return None if job is None else with_lease(job, self.visibility_timeout)

    def list_failed(
        self,
        *,
        type: str | None = None,
        failure_kind: FailureKind | None = None,
        limit: int = 100,
    ) -> list[Job[Any]]:
        """Terminal-failed jobs, newest failure first."""
        return self._ready().list_jobs(
            status="failed", type=type, failure_kind=failure_kind, limit=limit
        )

    def list_jobs(self, /, **filters: Any) -> list[Job[Any]]:
        """Jobs by ``status``, ``type``, ``failure_kind``, ``search``, ``parent_id``,
        ``waiting`` (suspended in a wait, see :mod:`durabl.stores.waiting`); ``limit``,
        ``offset``."""
        jobs = self._ready().list_jobs(**filters)
        return [with_lease(job, self.visibility_timeout) for job in jobs]

    def count_jobs(self, /, *, at_most: int | None = None, **filters: Any) -> int:
        """How many jobs the ``list_jobs`` filters select; with ``at_most``, a count that
        stops there (the result is then "at least ``at_most``")."""
        return self._ready().count_jobs(at_most=at_most, **filters)

    def retry(self, job_id: str) -> bool:
        """failed -> pending at attempt 0; False if not failed or its dedupe key is live."""
        return self._processors.job_moved(job_id, self._ready().retry(job_id))

    def delete(self, job_id: str) -> bool:
        """Remove a job that is not running."""
        return self._ready().delete(job_id)

    def wait(self, job_id: str, timeout: Seconds | None = None) -> Job[Any]:
        """Block until the job is terminal (completed, failed, superseded, cancelled) and
        return it, with its ``result``. ``TimeoutError`` when ``timeout`` seconds pass
        first (None: no limit); ``ValueError`` for an id no job has (or a job deleted
        meanwhile). Reads the store, a little less often the longer it waits (at most
        every half second)."""
        return wait_terminal(self.get_job, job_id, timeout)

    def prune(self, *, older_than: Seconds, statuses: Iterable[str] = PRUNE_STATUSES) -> int:
        """Delete the jobs in ``statuses`` (default completed, superseded and cancelled:
        failed jobs are kept unless named) that finished more than ``older_than`` seconds
        ago, with their logs, in one store operation; the number deleted. ``ValueError``
        for an age that is not positive or a status that is not terminal."""
        return self._ready().prune(older_than=older_than, statuses=statuses)

    def cancel(self, job_id: str, reason: str | None = None) -> bool:
        """Cancel a job. Pending: it ends ``cancelled`` at once (its dedupe slot freed).
        Active: cancellation is requested; the run's ``ctx.signal`` aborts with reason
        ``"cancelled"`` at its next heartbeat (within one heartbeat interval) and the job
        ends ``cancelled`` however the run ends, unless its handler returns first
        (``completed``). False for a terminal or unknown job, or when cancellation was
        already requested. ``reason`` (default ``"cancelled"``) is kept as
        ``fail_reason``."""
        return self._ready().cancel(job_id, reason) != "not-cancellable"

    def retry_matching(self, /, **filters: Any) -> int:
        """Retry every failed job the ``list_jobs`` filters (``type``, ``failure_kind``,
        ``search``) select, in one store operation: each as :meth:`retry` would (a job
        whose dedupe key is live stays failed). The number retried."""
        retried = self._ready().retry_matching(**filters)
        return self._processors.jobs_moved(filters.get("type"), retried)

    def delete_matching(self, /, **filters: Any) -> int:
        """Delete every job the ``list_jobs`` filters select that is not running, in one
        store operation. The number deleted."""
        return self._ready().delete_matching(**filters)

    def cancel_matching(self, /, *, reason: str | None = None, **filters: Any) -> int:
        """Cancel every job the ``list_jobs`` filters select, in one store operation, as
        :meth:`cancel` would each: pending ones end ``cancelled``, running ones are asked
        to stop; terminal ones are left. The number cancelled or asked."""
        return self._ready().cancel_matching(reason=reason, **filters)

    def run_now(self, job_id: str) -> bool:
        """Make a delayed pending job due now (one already due keeps its place in line);
        False when the job is not pending."""
        return self._processors.job_moved(job_id, self._ready().run_now(job_id))

    def run_now_matching(self, /, **filters: Any) -> int:
        """:meth:`run_now` every pending job the ``list_jobs`` filters select, in one store
        operation. The number of delayed jobs made due."""
        moved = self._ready().run_now_matching(**filters)
        return self._processors.jobs_moved(filters.get("type"), moved)

    def set_rate_limit(self, type: str, limit: int | None, per: Seconds | None = None) -> None:
        """At most ``limit`` jobs of ``type`` start in each window of ``per`` seconds
        (windows aligned to the epoch), across every process using this store; kept in
        the store. ``limit=None`` removes the type's limit."""
        self._ready().set_rate_limit(type, limit, per)

    def get_rate_limit(self, type: str) -> RateLimit | None:
        """The stored rate limit of ``type`` (``.limit``, ``.per``), or None."""
        return self._ready().get_rate_limit(type)

    def job_types(self) -> list[str]:
        """Types with stored jobs, plus the types this process handles."""
        return sorted(set(self._ready().job_types()) | set(self._processors.by_type))

    def activity(
        self,
        types: Sequence[str],
        *,
        buckets: int = 12,
        width: timedelta = timedelta(minutes=5),
        until: datetime | None = None,
    ) -> dict[str, TypeActivity]:
        """The recent activity of each of ``types``, in ``buckets`` buckets of ``width``
        ending ``until`` (default: the store's now): completions and failures per bucket,
        and the oldest due job's wait at each bucket's end. One store read, bounded by the
        jobs that finished in the window (:mod:`durabl.model.activity`)."""
        backend = self._ready()
        window = ActivityWindow(backend.now() if until is None else until, buckets, width)
        return type_activity(window, backend.read_activity(window, types), types)
