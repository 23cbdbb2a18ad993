"""SqliteJobQueue: the embedded backend, one SQLite file in WAL mode, shared by threads and
processes. The same contract as :class:`durabl.MongoJobQueue`; a cheap change check on the
file stands in for change streams."""

from __future__ import annotations

import functools
import math
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote

from durabl.model import activity
from durabl.model import job as model
from durabl.model.clock import SYSTEM_CLOCK, Clock, Seconds, to_seconds
from durabl.model.exceptions import DurablError
from durabl.model.flow import RateLimit
from durabl.model.job import Job, JobFilter, JobHandle, JobResult, LogEntry, handle_for
from durabl.model.options import DEFAULT_POLL_INTERVAL, NewJob
from durabl.model.payload import to_millis
from durabl.model.rules import JobPage, created_claimed, enqueues_before_inline_run
from durabl.model.schedule import Schedule
from durabl.model.workers import WorkerInfo
from durabl.stores import base
from durabl.stores.base import EnqueueResult, InlineClaimResult, StoreBase
from durabl.stores.sqlite import codec, queries, rates, schedules, schema, writes
from durabl.stores.sqlite import workers as worker_rows
from durabl.stores.sqlite.connection import SYNCHRONOUS_MODES, Connections, translate
from durabl.stores.sqlite.queries import JOBS
from durabl.stores.sqlite.watch import ChangeWatcher

R = TypeVar("R")


MIN_SQLITE = (3, 35, 0)


class SqliteJobQueue(StoreBase, base.FencedTransactions[sqlite3.Connection]):
    """Jobs in one SQLite file (WAL mode), safe across threads and processes.

    Each thread uses its own connection; each write is one ``BEGIN IMMEDIATE`` transaction,
    so the claim of a job by two processes is impossible. ``busy_timeout`` (seconds) is how
    long a write waits for another's lock before a few jittered retries and then
    :class:`~durabl.model.exceptions.BackendUnavailableError`; ``synchronous`` is SQLite's
    ``PRAGMA synchronous`` (``NORMAL``: durable against process crashes; ``FULL`` also
    against power loss).

    ``change_check_interval`` (seconds, or None to turn it off) is how often a queue that
    processes jobs checks the file for commits by other connections (``PRAGMA
    data_version``: a few microseconds, no lock), so that a job enqueued by another process
    starts within about that long rather than at the next poll.

    ``close()`` is for shutdown: it closes every connection this object opened, in every
    thread (a connection in use is closed by its thread when its operation ends). Using the
    object afterwards opens fresh connections. With ``create=False`` a missing file raises
    :class:`~durabl.model.exceptions.StoreNotFoundError` instead of being created.
    """

    supports_journal = True
    supports_schedules = True
    supports_workers = True
    #: True while the change check is on: the queue then runs a :class:`ChangeWatcher`.
    supports_push: bool
    #: Push here only adds wake-ups: processors keep polling at their usual interval, for
    #: jobs that become due later (``run_at``, retries) with no commit to announce them.
    safety_poll_interval = DEFAULT_POLL_INTERVAL

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout: float = 5.0,
        synchronous: str = "NORMAL",
        change_check_interval: Seconds | None = 0.005,
        create: bool = True,
    ) -> None:
        raw = os.fspath(path)
        if not isinstance(raw, str) or not raw or raw == ":memory:" or raw.startswith("file:"):
            raise ValueError(
                f"SqliteJobQueue needs a plain database file path, got {path!r} (not a "
                "'file:' URI; not ':memory:', which each connection would see as a database "
                "of its own: use MemoryBackend for that)"
            )
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)):
            raise ValueError(f"busy_timeout must be a number of seconds, got {busy_timeout!r}")
        if not math.isfinite(busy_timeout) or busy_timeout < 0:
            raise ValueError(f"busy_timeout must be finite and >= 0, got {busy_timeout!r}")
        mode = str(synchronous).upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
        if change_check_interval is not None:
            change_check_interval = to_seconds(change_check_interval, "change_check_interval")
            if change_check_interval == 0:
                raise ValueError("change_check_interval must be positive (None turns it off)")
        self.change_check_interval = change_check_interval
        self.supports_push = change_check_interval is not None
        self.path = os.path.abspath(raw)
        self.clock: Clock = clock or SYSTEM_CLOCK
        #: Added to the reaper's cutoff. One machine has one clock, so 0 (kept for parity
        #: with MongoJobQueue and the contract suite).
        self.clock_skew_allowance = 0.0
        self._db = Connections(
            self.path, busy_timeout=float(busy_timeout), synchronous=mode, create=create
        )
        self._started = False
        self._startup_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SqliteJobQueue({self.path!r})"

    URL_OPTIONS = frozenset(
        {
            "clock",
            "busy_timeout",
            "synchronous",
            "change_check_interval",
            "connect_timeout",
            "create",
        }
    )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteJobQueue:
        """SQLAlchemy's convention: ``sqlite:///rel.db`` is relative to the working
        directory, ``sqlite:////abs.db`` absolute. Options (``clock``, ``busy_timeout``,
        ``synchronous``, ``change_check_interval``, ``create``) go to the constructor."""
        path = cls.path_from_url(url)
        unknown = set(options) - cls.URL_OPTIONS
        if unknown:
            raise ValueError(f"sqlite:// URLs take no options {sorted(unknown)}")
        # The store-neutral bound on reaching the store: for a file, the wait for its lock.
        connect_timeout = options.pop("connect_timeout", None)
        if connect_timeout is not None:
            options.setdefault("busy_timeout", connect_timeout)
        return cls(path, **options)

    @staticmethod
    def path_from_url(url: str) -> str:
        """The file a ``sqlite://`` URL names (relative paths stay relative to the cwd)."""
        rest = url.split("://", 1)[1] if "://" in url else ""
        if not rest.startswith("/") or len(rest) < 2 or "?" in rest or "#" in rest:
            raise ValueError(
                f"expected sqlite:///relative/path.db or sqlite:////absolute/path.db, got {url!r}"
            )
        path = unquote(rest[1:])
        if path in ("", ":memory:"):
            raise ValueError(f"{url!r} names no database file; SQLite needs a file path here")
        return path

    # -- plumbing -------------------------------------------------------------------------
    def now(self) -> datetime:
        return to_millis(self.clock.now())

    def _now_ms(self) -> int:
        return codec.to_ms(self.now())

    def _write(
        self, operation: str, fn: Callable[[sqlite3.Connection], R], timeout: float | None = None
    ) -> R:
        if not self._started:
            self.startup()
        return self._db.run(operation, fn, write=True, timeout=timeout)

    def _read(self, operation: str, fn: Callable[[sqlite3.Connection], R]) -> R:
        if not self._started:
            self.startup()
        return self._db.run(operation, fn, write=False)

    def push_unavailable(self) -> str | None:
        if not self.supports_push:
            return "the change check is off (change_check_interval=None)"
        return None

    def startup(self) -> None:
        """Create or upgrade the schema. Idempotent; safe on a file that holds jobs and when
        several processes start at once (each migration runs under the write lock and is
        skipped by whoever finds it already applied). Every other operation calls it first
        if nobody has."""
        with self._startup_lock:
            if self._started:
                return
            if sqlite3.sqlite_version_info < MIN_SQLITE:
                raise DurablError(
                    f"durabl's SQLite backend needs SQLite {'.'.join(map(str, MIN_SQLITE))} or "
                    f"newer (for UPDATE ... RETURNING); this Python has {sqlite3.sqlite_version}"
                )
            version = self._db.run("startup", schema.read_version, write=False)
            for migration in schema.pending_migrations(version, self.path):
                apply = functools.partial(
                    schema.apply_migration, migration=migration, path=self.path
                )
                self._db.run(f"schema migration {migration[0]}", apply, write=True)
            self._started = True

    def schema_version(self) -> base.SchemaVersion:
        """The file's schema version (0: not set up yet), read without migrating."""
        current = self._db.run("schema_version", schema.read_version, write=False)
        return base.SchemaVersion(current, schema.latest_version())

    def close(self) -> None:
        self._db.close_all()

    def open_push(self, listener: base.PushListener) -> ChangeWatcher:
        """A change watcher for ``listener`` (a queue), not started."""
        if self.change_check_interval is None:
            raise DurablError("the change check is off (change_check_interval=None)")
        return ChangeWatcher(
            self._data_version,
            listener,
            interval=self.change_check_interval,
            path=self.path,
            on_exit=self._db.close_current,
        )

    def _data_version(self) -> int:
        """This thread's connection's ``PRAGMA data_version``: it moves when another
        connection commits."""
        if not self._started:
            self.startup()
        try:
            with self._db.connection() as conn:
                return int(conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise translate("change check", exc) from exc

    def check_size(self, job: NewJob) -> None:
        """Nothing beyond the shared payload budget that ``build_new_job`` already applied."""

    # -- enqueue --------------------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        row = writes.new_row(job, self._now_ms())
        return self._write("enqueue", lambda conn: writes.enqueue(conn, job, row))

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        now = self._now_ms()
        row = writes.new_row(job, now)
        if enqueues_before_inline_run(job):

            def follow(conn: sqlite3.Connection) -> InlineClaimResult:
                # The pending slot decides: a pending follower already covers the work.
                enq = writes.enqueue(conn, job, row)
                if enq.job_id is None:
                    return InlineClaimResult(None, None, enq.coalesced)
                params = {"job_id": enq.job_id, "now": now, "owner": lease_owner}
                handles = self._claim_in(conn, writes.BY_ID, params, 1)
                if not handles:  # the key has an active run: the new job is its follower
                    return InlineClaimResult(None, enq.job_id)
                return InlineClaimResult(handles[0])

            return self._write("claim_or_enqueue", follow)
        token = uuid.uuid4().hex
        row.update(created_claimed(token, now, lease_owner))

        def create(conn: sqlite3.Connection) -> InlineClaimResult:
            if job.dedupe_key is not None:
                writes.check_scope(conn, job)
            if not writes.insert(conn, row):
                return InlineClaimResult(None, None, writes.slot_taken(conn, job, row).coalesced)
            job_now = queries.get_job(conn, row["id"])
            assert job_now is not None
            return InlineClaimResult(handle_for(job_now, token, self))

        return self._write("claim_or_enqueue", create)

    # -- schedules (durabl.stores.sqlite.schedules) ------------------------------------
    def upsert_schedule(self, schedule: Schedule, next_run_at: datetime) -> None:
        self._write("upsert_schedule", lambda conn: schedules.upsert(conn, schedule, next_run_at))

    def load_schedules(self) -> list[Schedule]:
        return self._read("load_schedules", schedules.load)

    def delete_schedule(self, name: str) -> bool:
        return self._write("delete_schedule", lambda conn: schedules.delete(conn, name))

    def fire_schedule(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None:
        now = self._now_ms()
        return self._write(
            "fire_schedule", lambda conn: schedules.fire(conn, schedule, next_run_at, jobs, now)
        )

    # -- workers registry (durabl.stores.sqlite.workers) -----------------------------------
    def upsert_worker(self, info: WorkerInfo) -> None:
        self._write("upsert_worker", lambda conn: worker_rows.upsert(conn, info))

    def load_workers(self) -> list[WorkerInfo]:
        return self._read("load_workers", worker_rows.load)

    def delete_worker(self, worker_id: str) -> bool:
        return self._write("delete_worker", lambda conn: worker_rows.delete(conn, worker_id))

    def prune_workers(self, last_seen_before: datetime) -> int:
        return self._write("prune_workers", lambda conn: worker_rows.prune(conn, last_seen_before))

    # -- claiming -------------------------------------------------------------------------
    def _claim_in(
        self,
        conn: sqlite3.Connection,
        candidates: str,
        params: dict[str, Any],
        limit: int,
        reserve: bool = False,
    ) -> list[JobHandle[Any]]:
        """Claim through :func:`writes.claim` (``params`` with ``now`` and ``owner``) and
        read the claimed jobs' logs: their handles in claim order."""
        rows = writes.claim(conn, candidates, params, limit, reserve)
        if not rows:
            return []
        logs = queries.load_logs(conn, [r["id"] for r in rows])
        return [
            handle_for(codec.to_job(r, logs.get(r["id"], ())), r["claim_token"], self) for r in rows
        ]

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        """Claim up to ``limit`` due jobs of ``type`` in one transaction: one statement, or
        two when some are read ahead (``starting`` < ``limit``)."""
        now = self._now_ms()
        if not self._read("claim", lambda conn: queries.has_due(conn, type, now)):
            return []  # an idle poll reads; it never queues behind writers for the lock
        params = {"type": type, "now": now, "owner": lease_owner}
        return self._write("claim", lambda conn: self._claim_due(conn, params, limit, starting))

    def _claim_due(
        self,
        conn: sqlite3.Connection,
        params: dict[str, Any],
        limit: int,
        starting: int | None,
    ) -> list[JobHandle[Any]]:
        now = params["now"]
        rate = rates.allowance(conn, params["type"], now)
        if rate is not None:
            limit = min(limit, rate[1])
            if not limit:
                return []  # the window is full: nothing written until the next one
        first = limit if starting is None else min(starting, limit)
        handles = self._claim_in(conn, writes.DUE_OF_TYPE, params, first) if first else []
        if len(handles) == first < limit:
            ahead = limit - first
            handles += self._claim_in(conn, writes.DUE_OF_TYPE, params, ahead, reserve=True)
        if rate is not None and handles:
            rates.count(conn, params["type"], rate[0], now, len(handles))
        return handles

    # -- flow control (durabl.stores.sqlite.rates) --------------------------------------
    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        self._write("set_rate_limit", lambda conn: rates.write(conn, type, rate))

    def read_rate_limit(self, type: str) -> RateLimit | None:
        return self._read("get_rate_limit", lambda conn: rates.read(conn, type))

    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        """One statement (one transaction) for every claim in ``claims``."""
        if claims:
            tokens = [token for _, token in claims]
            self._write("mark_started", lambda conn: writes.mark_started(conn, tokens))

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        now = self._now_ms()
        params = {"type": type, "key": dedupe_key, "now": now, "owner": lease_owner}
        handles = self._write(
            "claim_next_by_key", lambda conn: self._claim_in(conn, writes.DUE_BY_KEY, params, 1)
        )
        return handles[0] if handles else None

    # -- fenced writes --------------------------------------------------------------------
    def _fence_params(self, job_id: str, token: str) -> dict[str, Any]:
        return {"id": job_id, "token": token, "now": self._now_ms()}

    def _resolve_miss(self, tx: sqlite3.Connection, job_id: str, token: str, op: str) -> JobResult:
        return writes.resolve_miss(tx, job_id, token, op)

    def _record_applied(self, tx: sqlite3.Connection, applied: base.AppliedWrite) -> None:
        job_id, token, op, result, logs = applied
        writes.add_logs(tx, job_id, logs)
        writes.add_receipt(tx, job_id, token, op, result)

    def _in_write(
        self, op: str, write: Callable[[sqlite3.Connection], R], timeout: float | None
    ) -> R:
        return self._write(op, write, timeout=timeout)

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> model.HeartbeatResult:
        params = {"id": job_id, "token": token, "now": self._now_ms()}

        def beat(conn: sqlite3.Connection) -> model.HeartbeatResult:
            row = conn.execute(
                f"UPDATE {JOBS} SET heartbeat_at = :now WHERE {writes.FENCE} "
                "RETURNING cancel_requested",
                params,
            ).fetchone()
            if row is None:
                return "lease-lost"
            writes.add_logs(conn, job_id, logs)
            return "applied" if row["cancel_requested"] is None else "cancel-requested"

        return self._write("heartbeat", beat)

    def write_completions(self, op: str, completions: Sequence[base.Completion]) -> list[JobResult]:
        """Every completion in one write transaction, each fenced on its own token."""
        now = self._now_ms()
        return self._write(op, lambda conn: writes.complete_many(conn, completions, now))

    def write_failure(
        self, job_id: str, token: str, failure: base.Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        reason, kind = failure.reason, failure.kind

        if failure.retry_at is None:

            def apply(
                conn: sqlite3.Connection, params: dict[str, Any]
            ) -> model.ResultStatus | None:
                extra = ", fail_reason = :reason, failure_kind = :kind"
                ending = writes.ending(failure.terminal_outcome, failure.error)
                fatal = {**params, "reason": reason, "kind": kind, **ending}
                done = writes.set_terminal(conn, fatal, "failed", extra)
                return "failed-terminal" if done else None

        else:
            retry_ms = codec.to_ms(failure.retry_at)

            def apply(
                conn: sqlite3.Connection, params: dict[str, Any]
            ) -> model.ResultStatus | None:
                return writes.fail(
                    conn,
                    params,
                    reason,
                    retry_ms,
                    kind,
                    error=failure.error,
                    terminal_outcome=failure.terminal_outcome,
                )

        return self._fenced(failure.op, job_id, token, logs, apply)

    def write_release(
        self, job_id: str, token: str, release: base.Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        """Back to pending at its old ``run_at`` (or at ``release.run_at``), refunding the
        attempt. The timeout bounds the wait for the write lock, retries included."""
        wake = None if release.run_at is None else codec.to_ms(release.run_at)

        def apply(conn: sqlite3.Connection, params: dict[str, Any]) -> model.ResultStatus | None:
            requested = writes.requested_cancel(conn, params)
            if requested is not None:  # not back to pending: it was cancelled
                return writes.end_cancelled(conn, params, requested)
            extra = ", attempts = attempts - 1"
            params = {**params, **writes.ending("released")}
            if wake is not None:
                extra += ", run_at = :run_at"
                params = {**params, "run_at": wake}
            return writes.to_pending_or_supersede(conn, params, extra, "released")

        return self._fenced("release", job_id, token, logs, apply, timeout=release.timeout)

    def write_cancel(self, job_id: str, reason: str) -> model.CancelOutcome:
        now = self._now_ms()
        return self._write("cancel", lambda conn: writes.cancel(conn, job_id, reason, now))

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        def apply(conn: sqlite3.Connection, params: dict[str, Any]) -> model.ResultStatus | None:
            return writes.end_cancelled(conn, params, writes.requested_cancel(conn, params))

        return self._fenced("cancel", job_id, token, logs, apply)

    def append_journal(
        self, job_id: str, token: str, records: Sequence[model.JournalRecord], *, position: int
    ) -> model.JournalAppendResult:
        """Read, extend and write back the journal column in one write transaction."""
        params = {"id": job_id, "token": token}
        entries = [dict(r) for r in records]

        def write(conn: sqlite3.Connection) -> model.JournalAppendResult:
            applied = writes.append_journal(conn, params, entries, position)
            return "applied" if applied else "lease-lost"

        return self._write("append_journal", write)

    # -- recovery -------------------------------------------------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> model.ReapReport:
        """Recover up to ``limit`` expired leases, all in one write transaction."""
        now = self.now()
        cutoff = now - timedelta(seconds=visibility_timeout + self.clock_skew_allowance)
        # heartbeat_at (whole ms) < cutoff exactly when it is < the cutoff rounded up.
        params: dict[str, Any] = {"now": codec.to_ms(now), "cutoff": codec.ceil_ms(cutoff)}

        def sweep(conn: sqlite3.Connection) -> model.ReapReport:
            stuck = conn.execute(
                "SELECT id, claim_token, attempts, max_attempts, reserved, unstarted_reaps, "
                "cancel_requested "
                f"FROM {JOBS} "
                "INDEXED BY durabl_lease WHERE status = 'active' AND heartbeat_at < :cutoff "
                "ORDER BY heartbeat_at, seq LIMIT :limit",
                {**params, "limit": queries.sql_limit(limit)},
            ).fetchall()
            counts = {"recovered": 0, "stalled": 0, "superseded": 0}
            ids: list[str] = []
            for row in stuck:
                outcome = writes.reap_one(conn, row, params)
                if outcome is not None:
                    counts[outcome] += 1
                    ids.append(row["id"])
            return model.ReapReport(
                counts["recovered"],
                counts["stalled"],
                counts["superseded"],
                len(stuck) >= limit,
                tuple(ids),
            )

        return self._write("reap", sweep)

    # -- queries and operations -----------------------------------------------------------
    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        return self._read(
            "has_outstanding", lambda conn: queries.has_outstanding(conn, type, dedupe_key)
        )

    def get_job(self, job_id: str) -> Job[Any] | None:
        return self._read("get_job", lambda conn: queries.get_job(conn, job_id))

    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        return self._read("list_jobs", lambda conn: queries.list_jobs(conn, filters, page))

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        where, params = queries.filters(filters, newest)
        return self._read(
            "count_jobs", lambda conn: queries.count_jobs(conn, where, params, at_most)
        )

    def retry(self, job_id: str) -> bool:
        """failed -> pending, due now, attempts 0. False when the job is not failed or its
        key is live (under either scope)."""
        now = self._now_ms()
        return self._write("retry", lambda conn: writes.retry(conn, job_id, now))

    def retry_selected(self, filters: JobFilter) -> int:
        """Each selected job as :meth:`retry` would, oldest first, in one transaction."""
        where, params = queries.filters(filters)
        now = self._now_ms()

        def write(conn: sqlite3.Connection) -> int:
            ids = queries.matching_ids(conn, where, params)
            return sum(writes.retry(conn, job_id, now) for job_id in ids)

        return self._write("retry_matching", write)

    def delete_selected(self, filters: JobFilter) -> int:
        where, params = queries.filters(filters)
        return self._write(
            "delete_matching",
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {JOBS} WHERE ({where}) AND status != 'active'", params
                ).rowcount
            ),
        )

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        where, params = queries.filters(filters)
        now = self._now_ms()
        return self._write(
            "cancel_matching",
            lambda conn: writes.cancel_matching(conn, where, params, reason, now),
        )

    def run_now(self, job_id: str) -> bool:
        now = self._now_ms()
        return self._write("run_now", lambda conn: writes.run_now(conn, job_id, now))

    def run_now_selected(self, filters: JobFilter) -> int:
        where, params = queries.filters(filters)
        now = self._now_ms()
        return self._write(
            "run_now_matching", lambda conn: writes.run_now_matching(conn, where, params, now)
        )

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        """One DELETE over the (status, finished_at) index; logs and receipts cascade."""
        before = codec.to_ms(self.now() - timedelta(seconds=older_than))
        marks = ", ".join("?" * len(statuses))
        return self._write(
            "prune",
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {JOBS} WHERE status IN ({marks}) AND finished_at < ?",
                    (*statuses, before),
                ).rowcount
            ),
        )

    def delete(self, job_id: str) -> bool:
        return self._write(
            "delete",
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {JOBS} WHERE id = ? AND status != 'active'", (job_id,)
                ).rowcount
                == 1
            ),
        )

    def get_stats(self, type: str | None = None) -> model.QueueStats:
        now = self.now()
        return self._read("get_stats", lambda conn: queries.stats(conn, type, now))

    def job_types(self) -> list[str]:
        return self._read("job_types", queries.job_types)

    def stats_by_type(self) -> dict[str, model.QueueStats]:
        now = self.now()
        return self._read("stats_by_type", lambda conn: queries.stats_by_type(conn, now))

    def find_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        """Two statements in one read transaction: the counts, then the candidates."""

        def read(conn: sqlite3.Connection) -> activity.ActivityRead:
            counts = queries.activity_counts(conn, window, types)
            return activity.ActivityRead(counts, queries.activity_candidates(conn, window, types))

        return self._read("read_activity", read)
