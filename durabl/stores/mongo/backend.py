"""MongoJobQueue: the production backend. The only module family that talks to pymongo.

A MongoJobQueue owns a :class:`~durabl.stores.mongo.store.MongoStore` (the collection,
retries, deadlines, the server clock, the indexes) and hands it to its parts, to which it
passes each operation on: :class:`~durabl.stores.mongo.claims.MongoClaims` (enqueue and
claim), :class:`~durabl.stores.mongo.writes.MongoWrites` (the writes fenced on a claim),
:class:`~durabl.stores.mongo.queries.MongoQueries` (the operator's reads and writes),
:class:`~durabl.stores.mongo.reaper.MongoReaper`, and the schedules and workers registry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.write_concern import WriteConcern

from durabl.model import activity
from durabl.model import job as model
from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import DurablError
from durabl.model.flow import RateLimit
from durabl.model.job import Job, JobFilter, JobHandle, JobResult, LogEntry
from durabl.model.options import PUSH_SAFETY_POLL_INTERVAL, NewJob
from durabl.model.reports import QueueStats, ReapReport
from durabl.model.rules import JobPage
from durabl.stores import base, push
from durabl.stores.base import EnqueueResult, InlineClaimResult
from durabl.stores.engine import StoreBase
from durabl.stores.mongo import codec, factory, indexes, inserts
from durabl.stores.mongo.attempts import ClaimMemo
from durabl.stores.mongo.changestream import DEFAULT_BATCH_WINDOW, PushSettings
from durabl.stores.mongo.claims import MongoClaims
from durabl.stores.mongo.pauses import MongoPauses
from durabl.stores.mongo.pushreads import open_watcher
from durabl.stores.mongo.queries import MongoQueries
from durabl.stores.mongo.reaper import MongoReaper
from durabl.stores.mongo.schedules import MongoSchedules
from durabl.stores.mongo.signals import MongoSignals
from durabl.stores.mongo.store import REGISTRY_REMOVAL_TIMEOUT, MongoStore
from durabl.stores.mongo.subscriptions import MongoSubscriptions
from durabl.stores.mongo.watcher import Watcher
from durabl.stores.mongo.workers import MongoWorkers
from durabl.stores.mongo.writes import MongoWrites

logger = logging.getLogger(__name__)


class MongoJobQueue(StoreBase):
    """Jobs in one MongoDB collection.

    ``use_change_streams`` asks for push pickup; ``startup()`` then refuses a server that
    cannot provide it (see docs/change-streams.md). While the stream is up, processors on
    the default poll interval poll every ``safety_poll_interval`` seconds; notifications
    are batched for ``push_batch_window`` seconds (``push_settings`` holds the rest).
    ``clock_skew_allowance`` (seconds) is added to every lease deadline the reaper checks,
    on top of timestamps taken from the server's clock (default 2 s on a server, 0 on
    mongomock). ``write_concern`` is what every write waits for: by default the database's
    own if its client or URL set one, else majority and journaled (docs/operations.md).
    """

    supports_journal = True
    supports_schedules = True
    supports_workers = True
    supports_subscriptions = True
    supports_signals = True
    supports_pause = True
    schedules: MongoSchedules
    workers: MongoWorkers
    subscriptions: MongoSubscriptions
    signals: MongoSignals
    pauses: MongoPauses

    def __init__(
        self,
        db: Database[Any],
        collection: str = "durabl_jobs",
        use_change_streams: bool = False,
        *,
        clock: Clock | None = None,
        server_time: bool = True,
        clock_skew_allowance: float | None = None,
        owns_client: bool = False,
        safety_poll_interval: float = PUSH_SAFETY_POLL_INTERVAL,
        push_batch_window: float = DEFAULT_BATCH_WINDOW,
        write_concern: WriteConcern | None = None,
    ) -> None:
        self.store = MongoStore(
            db,
            collection,
            clock=clock or SYSTEM_CLOCK,
            server_time=server_time and clock is None,
            clock_skew_allowance=clock_skew_allowance,
            owns_client=owns_client,
            write_concern=write_concern,
        )
        self.clock = self.store.clock
        self.clock_skew_allowance = self.store.clock_skew_allowance
        self.collection_name = collection
        self.use_change_streams = use_change_streams
        self.safety_poll_interval = push.safety_poll_interval(safety_poll_interval)
        self.push_settings = PushSettings(batch_window=push_batch_window)
        #: The claims made here that no outcome has recorded yet (their attempt entries).
        self._claims = ClaimMemo()
        self.pauses = MongoPauses(self.store)
        self.claims = MongoClaims(self.store, self._claims, writer=self, pauses=self.pauses)
        self.writes = MongoWrites(self.store, self._claims)
        self.queries = MongoQueries(self.store)
        self.reaper = MongoReaper(self.store)
        self.schedules = MongoSchedules(self.store)
        self.workers = MongoWorkers(self.store)
        self.subscriptions = MongoSubscriptions(self.store)
        self.signals = MongoSignals(self.store)

    def __repr__(self) -> str:
        return f"MongoJobQueue(db={self.db.name!r}, collection={self.collection_name!r})"

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MongoJobQueue:
        """A store for ``mongodb://host/db``, ``mongodb+srv://...`` or ``mongomock://[/db]``
        (one shared in-process mongomock client). Options: ``database``, ``collection``,
        ``use_change_streams``, ``clock_skew_allowance``, ``write_concern``,
        ``connect_timeout`` (seconds to reach the server, for every store), and pymongo
        client options (``connect=False`` by default: nothing connects here)."""
        return factory.from_url(cls, url, **options)

    # -- what the parts share: setting one here sets it for all of them -------------------
    @property
    def db(self) -> Database[Any]:
        return self.store.db

    @db.setter
    def db(self, db: Database[Any]) -> None:
        self.store.db = db

    @property
    def col(self) -> Collection[dict[str, Any]]:
        """The jobs collection."""
        return self.store.col

    @col.setter
    def col(self, col: Collection[dict[str, Any]]) -> None:
        self.store.col = col

    @property
    def _rates(self) -> Collection[dict[str, Any]]:
        """The rate limits collection (``<collection>_rate_limits``)."""
        return self.claims.rates

    @_rates.setter
    def _rates(self, rates: Collection[dict[str, Any]]) -> None:
        self.claims.rates = rates

    # -- the store's plumbing -------------------------------------------------------------
    def now(self) -> datetime:
        """The server's clock where it tells us, else this host's."""
        return self.store.now()

    def startup(self) -> None:
        """Create the indexes (idempotent), check change-stream support if asked, and read
        which types have a rate limit (unless read lately) and which are paused."""
        self.store.startup()
        if self.use_change_streams and not self.supports_push:
            self.store.calls.check_change_streams(self.db)
            self.supports_push = True
        self.claims.limited.refresh(self.claims.limited_types)
        self.pauses.refresh()

    def pending_setup(self) -> tuple[str, ...]:
        """The indexes ``startup()`` would create (none are created here)."""
        col = self.store.col
        return tuple(self.store.call("pending_setup", lambda: indexes.missing_indexes(col)))

    def close(self) -> None:
        self.store.close()

    def delete_worker(self, worker_id: str) -> bool:
        # A queue's last write as it stops or its process exits: bounded, whatever the URL's
        # server selection timeout, so a server that is down does not hold the exit up.
        with self.store.bounded(REGISTRY_REMOVAL_TIMEOUT):
            return self.workers.delete(worker_id)

    def drop(self) -> None:
        """Delete the collection (tests and the demo)."""
        self.store.drop()

    def check_size(self, job: NewJob) -> None:
        codec.check_document_size(job.type, codec.new_document(job, self.clock.now()))

    # -- push pickup ----------------------------------------------------------------------
    def push_unavailable(self) -> str | None:
        if not self.use_change_streams:
            return "change streams are off (use_change_streams=False)"
        if not self.supports_push:
            return "push pickup is not verified yet (the store's startup() has not run)"
        return None

    def open_push(self, listener: base.PushListener) -> Watcher:
        """The change-stream watcher for a queue (not started): see
        :mod:`durabl.stores.mongo.changestream`."""
        if not self.supports_push:
            raise DurablError("push pickup needs use_change_streams=True and startup()")
        return open_watcher(self.store, listener, self.push_settings, resumed=self.pauses.resumed)

    # -- enqueue and claim (MongoClaims) --------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        return self.claims.enqueue(job)

    def insert_many(self, jobs: Sequence[NewJob]) -> list[str | None]:
        return inserts.insert_many(self.store, jobs)

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        return self.claims.claim_or_enqueue(job, lease_owner)

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        return self.claims.claim_due(type, limit, lease_owner, starting)

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        return self.claims.claim_next_by_key(type, dedupe_key, lease_owner=lease_owner)

    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        self.claims.mark_started(claims)

    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        self.claims.write_rate_limit(type, rate)

    def read_rate_limit(self, type: str) -> RateLimit | None:
        return self.claims.read_rate_limit(type)

    # -- fenced writes (MongoWrites) ------------------------------------------------------
    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> model.HeartbeatResult:
        return self.writes.heartbeat(job_id, token, logs=logs)

    def write_completions(self, op: str, completions: Sequence[base.Completion]) -> list[JobResult]:
        return self.writes.write_completions(op, completions)

    def write_failure(
        self, job_id: str, token: str, failure: base.Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        return self.writes.write_failure(job_id, token, failure, logs)

    def write_release(
        self, job_id: str, token: str, release: base.Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        return self.writes.write_release(job_id, token, release, logs)

    def write_cancel(self, job_id: str, reason: str) -> model.CancelOutcome:
        return self.writes.write_cancel(job_id, reason)

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        return self.writes.write_cancelled_run(job_id, token, logs)

    def append_journal(
        self, job_id: str, token: str, records: Sequence[model.JournalRecord], *, position: int
    ) -> model.JournalAppendResult:
        return self.writes.append_journal(job_id, token, records, position=position)

    # -- recovery and operations (MongoReaper, MongoQueries) ------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> ReapReport:
        report = self.reaper.reap(visibility_timeout, limit=limit)
        try:
            self.schedules.sweep_held()
        except DurablError as exc:  # the sweep's turn comes again; the report stands
            logger.warning("sweep of held schedule ticks failed: %s", exc)
        return report

    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        return self.queries.has_outstanding(type, dedupe_key)

    def get_job(self, job_id: str) -> Job[Any] | None:
        return self.queries.get_job(job_id)

    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        return self.queries.find_jobs(filters, page)

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        return self.queries.count_matching(filters, at_most=at_most, newest=newest)

    def retry(self, job_id: str) -> bool:
        return self.queries.retry(job_id)

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        return self.queries.delete_finished(older_than, statuses)

    def delete(self, job_id: str) -> bool:
        return self.queries.delete(job_id)

    def retry_selected(self, filters: JobFilter) -> int:
        return self.queries.retry_selected(filters)

    def delete_selected(self, filters: JobFilter) -> int:
        return self.queries.delete_selected(filters)

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        return self.queries.cancel_selected(filters, reason)

    def run_now(self, job_id: str) -> bool:
        return self.queries.run_now(job_id)

    def run_now_selected(self, filters: JobFilter) -> int:
        return self.queries.run_now_selected(filters)

    def get_stats(self, type: str | None = None) -> QueueStats:
        return self.queries.get_stats(type)

    def job_types(self) -> list[str]:
        return self.queries.job_types()

    def stats_by_type(self) -> dict[str, QueueStats]:
        return self.queries.stats_by_type()

    def find_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        return self.queries.read_activity(window, types)
