"""PostgresJobQueue: the whole Backend contract on a PostgreSQL server, across processes
and machines."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import Cursor
from psycopg.errors import UniqueViolation
from psycopg.rows import DictRow

from durabl.model import activity
from durabl.model import job as model
from durabl.model.clock import SYSTEM_CLOCK, Clock, as_utc
from durabl.model.exceptions import DurablError
from durabl.model.flow import LimitedTypes, RateLimit
from durabl.model.job import Job, JobFilter, JobHandle, JobResult, LogEntry, handle_for
from durabl.model.options import DEFAULT_POLL_INTERVAL, NewJob
from durabl.model.payload import to_millis
from durabl.model.rules import JobPage, enqueues_before_inline_run
from durabl.model.schedule import Schedule
from durabl.model.workers import WorkerInfo
from durabl.stores import base, push
from durabl.stores.base import EnqueueResult, InlineClaimResult, StoreBase
from durabl.stores.postgres import codec, rates, reads, schedules, schema, writes
from durabl.stores.postgres import workers as worker_rows
from durabl.stores.postgres.connection import (
    STORE_OPTIONS,
    Database,
    caller_connection,
    parse_url,
    redact_url,
    run_in_caller_transaction,
    store_options,
    with_connect_timeout,
)
from durabl.stores.postgres.listener import ListenSettings, NotifyListener
from durabl.stores.postgres.sql import Queries, order_by

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

R = TypeVar("R")
Tx = Cursor[DictRow]
#: How often a claim is repeated after losing the race for the last slot of a key.
_SLOT_RACES = 5
#: What the listener's own connection takes over from a caller's pool's settings.
LISTENER_KWARGS = frozenset({"password", "user", "sslmode", "application_name", "options"})
#: The constructor's defaults for the options a URL may also give (``store_options``).
_KEYWORD_DEFAULTS: dict[str, object] = {
    "prepare_threshold": 5,
    "pool_min_size": 1,
    "pool_max_size": 10,
    "listen_notify": True,
    "safety_poll_interval": DEFAULT_POLL_INTERVAL,
}


class PostgresJobQueue(StoreBase, base.FencedTransactions[Tx]):
    """Jobs in PostgreSQL tables, safe across threads, processes and machines.

    ``url`` (``postgresql://user[:password]@host[:port]/db[?table=...&...]``): the store
    makes its own ``psycopg_pool.ConnectionPool`` at first use (``pool_min_size``,
    ``pool_max_size``) and ``close()`` closes it. ``pool``: the caller's pool, which
    ``close()`` leaves open (its connections should be in autocommit mode; others work, at
    two more round trips per operation).

    ``table`` names the jobs table; the logs, receipts and meta tables and every index are
    named after it (``<table>_logs`` ...), so several queues can share a database.
    ``prepare_threshold`` goes to psycopg (None: never prepare statements, for PgBouncer in
    transaction mode before 1.21).

    Time: without ``clock``, every lease, due time and ``now()`` is the *server's* clock
    (one clock for every process, whatever their machines' clocks say); with one (tests),
    every statement uses its time instead.

    Push pickup (``listen_notify``, on by default): every write that makes a job
    pending sends a NOTIFY at commit, and a queue that processes jobs keeps one listener
    connection (outside the pool) that wakes its processors at once, and at the ``run_at``
    of future jobs; see :mod:`durabl.stores.postgres.listener`. While it listens,
    processors on the default poll interval poll every ``safety_poll_interval`` seconds as
    the safety net. Turn it off behind PgBouncer in transaction mode (LISTEN needs a
    session).

    Transactional enqueue: ``queue.enqueue(..., connection=conn)`` inserts through the
    caller's own psycopg ``Connection``, inside the transaction open on it (see
    :meth:`insert_through`). ``enqueue_connection``: a function giving the connection
    every enqueue goes through that way (None from it: the pool) — how Django's own
    connection serves the enqueues made in Django code.
    """

    supports_journal = True
    supports_schedules = True
    supports_workers = True
    supports_transactional_enqueue = True
    #: True while ``listen_notify`` is on: the queue then runs a :class:`NotifyListener`.
    supports_push: bool

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: ConnectionPool[Any] | None = None,
        table: str = "durabl_jobs",
        clock: Clock | None = None,
        prepare_threshold: int | None = 5,  # the defaults of these five: _KEYWORD_DEFAULTS
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        listen_notify: bool = True,
        safety_poll_interval: float = DEFAULT_POLL_INTERVAL,
        listen_settings: ListenSettings | None = None,
        enqueue_connection: Callable[[], object | None] | None = None,
    ) -> None:
        self.listen_settings = listen_settings or ListenSettings()
        self.enqueue_connection = enqueue_connection
        conninfo = None
        if url is not None:
            conninfo, options = parse_url(url)
            table = options.get("table", table)
            # The URL's store options hold where the keyword was left at its default, so
            # PostgresJobQueue(url) reads the URL as backend_from_url(url) does.
            chosen: dict[str, Any] = {
                "prepare_threshold": prepare_threshold,
                "pool_min_size": pool_min_size,
                "pool_max_size": pool_max_size,
                "listen_notify": listen_notify,
                "safety_poll_interval": safety_poll_interval,
            }
            for name, value in store_options(options).items():
                if chosen[name] == _KEYWORD_DEFAULTS[name]:
                    chosen[name] = value
            prepare_threshold = chosen["prepare_threshold"]
            pool_min_size = int(chosen["pool_min_size"])
            pool_max_size = int(chosen["pool_max_size"])
            listen_notify = bool(chosen["listen_notify"])
            safety_poll_interval = float(chosen["safety_poll_interval"])
        self.listen_notify = bool(listen_notify)
        self.supports_push = self.listen_notify
        self.safety_poll_interval = push.safety_poll_interval(safety_poll_interval)
        self.url = url
        self.tables = schema.Tables(table)
        self.table = table
        self.clock_skew_allowance = 0.0  # one clock: the server's (or the injected one)
        self._clock = clock
        if clock is not None:
            self.clock = clock
        self._db = Database(
            conninfo,
            pool,
            url=url,
            prepare_threshold=prepare_threshold,
            min_size=pool_min_size,
            max_size=pool_max_size,
        )
        self._q = Queries(self.tables.names())
        self._channel = self.tables.channel
        self._locks = self.tables.key_lock_class
        self._rates = rates.RateStatements.for_tables(self.tables)
        #: The types with a rate limit: a claim of another type reads no window.
        self._limited = LimitedTypes((clock or SYSTEM_CLOCK).monotonic)
        self._started = False
        self._startup_lock = threading.Lock()

    def __repr__(self) -> str:
        where = redact_url(self.url) if self.url else "pool"
        return f"PostgresJobQueue({where!r}, table={self.table!r})"

    #: Keywords :meth:`from_url` takes beside the URL: the URL's own store options, the
    #: clock (tests), ``enqueue_connection`` (Django's ``django://`` URLs) and
    #: ``connect_timeout`` (seconds: libpq's, unless the URL sets its own).
    URL_OPTIONS = frozenset({"clock", "enqueue_connection", "connect_timeout", *STORE_OPTIONS})

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresJobQueue:
        """``postgresql://`` or ``postgres://``; the query options in ``STORE_OPTIONS``
        (``table``, ``prepare_threshold``, ``pool_min_size``, ``pool_max_size``,
        ``listen_notify``, ``safety_poll_interval``) are the store's, the others go to libpq
        (``sslmode``, ``connect_timeout`` (default 5 s), ``application_name`` ...). Nothing
        connects."""
        unknown = set(options) - cls.URL_OPTIONS
        if unknown:
            raise ValueError(f"postgresql:// URLs take no options {sorted(unknown)}")
        timeout = options.pop("connect_timeout", None)
        if timeout is not None:
            url = with_connect_timeout(url, timeout)
        _, query = parse_url(url)
        merged = store_options(query)
        return cls(url, **{**merged, **options})

    # -- plumbing -------------------------------------------------------------------------
    def _now_param(self) -> datetime | None:
        """The instant statements use: the injected clock's, or None (the server's)."""
        return None if self._clock is None else to_millis(self._clock.now())

    def now(self) -> datetime:
        if self._clock is not None:
            return to_millis(self._clock.now())
        row = self._read("now", lambda cur: reads.one(cur, self._q.server_now, {"now": None}))
        assert row is not None
        return as_utc(row["now"])

    def _run(
        self,
        operation: str,
        fn: Callable[[Tx], R],
        *,
        repeatable: bool = True,
        transaction: bool = True,
        timeout: float | None = None,
    ) -> R:
        if not self._started:
            self.startup()
        return self._db.run(
            operation, fn, repeatable=repeatable, transaction=transaction, timeout=timeout
        )

    def _read(self, operation: str, fn: Callable[[Tx], R]) -> R:
        return self._run(operation, fn, transaction=False)

    def startup(self) -> None:
        """Create or upgrade the schema: each migration in a transaction of its own under a
        transaction-level advisory lock, skipped by whoever finds it already applied.
        Idempotent; safe with many processes starting at once. Raises
        ``SchemaTooNewError`` for tables a newer durabl wrote. Every other operation calls
        it first if nobody has."""
        with self._startup_lock:
            if self._started:
                return
            t = self.tables
            version = self._db.run(
                "startup", lambda cur: schema.read_version(cur, t), repeatable=True
            )
            for migration in schema.pending_migrations(version, t):

                def apply(cur: Tx, migration: schema.Migration = migration) -> bool:
                    return schema.apply_migration(cur, migration, t)

                self._db.run(f"schema migration {migration[0]}", apply, repeatable=True)
            self._started = True
        # Which types have a rate limit, read once here (then when 30 s old, at a claim).
        self._limited.refresh(self._limited_types)

    def schema_version(self) -> base.SchemaVersion:
        """The tables' schema version (0: not created yet), read without migrating."""
        t = self.tables
        current = self._db.run(
            "schema_version", lambda cur: schema.read_version(cur, t), repeatable=True
        )
        return base.SchemaVersion(current, schema.latest_version())

    def close(self) -> None:
        """Close the pool if this store made it (a caller's pool stays open)."""
        self._db.close()

    def push_unavailable(self) -> str | None:
        if not self.listen_notify:
            return "LISTEN/NOTIFY is off (listen_notify=False)"
        return None

    def open_push(self, listener: base.PushListener) -> NotifyListener:
        """A LISTEN/NOTIFY listener for ``listener`` (a queue), not started: it holds a
        connection of its own, outside the pool, opened on its thread."""
        if not self.listen_notify:
            raise DurablError("push pickup needs listen_notify=True")
        if not self._started:
            self.startup()
        db = self._db
        if db.conninfo is not None:
            conninfo, extra = db.conninfo, {}
        else:  # the caller's pool: connect as it does
            pool = db.pool()
            info, kwargs = pool.conninfo, pool.kwargs
            conninfo = info() if callable(info) else info
            given = (kwargs() if callable(kwargs) else kwargs) or {}
            extra = {k: v for k, v in given.items() if k in LISTENER_KWARGS}

        def connect() -> psycopg.Connection[Any]:
            return psycopg.connect(conninfo, autocommit=True, **extra)

        clock = self._clock
        return NotifyListener(
            connect,
            listener,
            channel=self._channel,
            next_due=self._next_due,
            monotonic=time.monotonic if clock is None else clock.monotonic,
            settings=self.listen_settings,
            where=db.where,
        )

    def _next_due(self, types: Sequence[str]) -> dict[str, float]:
        """Seconds until the earliest future ``run_at`` of each of ``types`` that has one."""
        params = {"types": list(types), "now": self._now_param()}
        statement = self._q.next_due

        def read(cur: Tx) -> dict[str, float]:
            cur.execute(statement, params)
            return {row["type"]: row["delay_ms"] / 1000.0 for row in cur.fetchall()}

        return self._read("next_due", read)

    # -- enqueue --------------------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        if self.enqueue_connection is not None:
            connection = self.enqueue_connection()
            if connection is not None:
                return self.insert_through(job, connection)
        row = writes.new_row(job, self._channel, self._now_param())
        q, locks = self._q, self._locks
        keyed = job.dedupe_key is not None
        return self._run(
            "enqueue", lambda cur: writes.enqueue(cur, q, job, row, locks), transaction=keyed
        )

    def insert_through(self, job: NewJob, connection: object) -> EnqueueResult:
        """The enqueue's statements (:func:`writes.enqueue`, the NOTIFY included) on the
        caller's ``connection``, under a savepoint inside its transaction: the NOTIFY fires
        and workers see the job when the caller commits, and a scope conflict or a failed
        statement rolls back only the savepoint. A keyed job holds its key's lock until the
        caller's transaction ends, so other enqueues of that key wait for it."""
        conn = caller_connection(connection)
        if not self._started:
            self.startup()
        row = writes.new_row(job, self._channel, self._now_param())
        q, locks = self._q, self._locks
        return run_in_caller_transaction(
            conn, "enqueue", lambda cur: writes.enqueue(cur, q, job, row, locks), self._db.where
        )

    # -- schedules (durabl.stores.postgres.schedules) ----------------------------------
    def upsert_schedule(self, schedule: Schedule, next_run_at: datetime) -> None:
        self._run(
            "upsert_schedule", lambda cur: schedules.upsert(cur, self._q, schedule, next_run_at)
        )

    def load_schedules(self) -> list[Schedule]:
        return self._read("load_schedules", lambda cur: schedules.load(cur, self._q))

    def delete_schedule(self, name: str) -> bool:
        return self._run("delete_schedule", lambda cur: schedules.delete(cur, self._q, name))

    def fire_schedule(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None:
        now = self._now_param()
        rows = [(tick, job, writes.new_row(job, self._channel, now)) for tick, job in jobs]
        q, locks = self._q, self._locks
        return self._run(
            "fire_schedule",
            lambda cur: schedules.fire(cur, q, locks, schedule, next_run_at, rows),
        )

    # -- workers registry (durabl.stores.postgres.workers) ---------------------------------
    def upsert_worker(self, info: WorkerInfo) -> None:
        self._run("upsert_worker", lambda cur: worker_rows.upsert(cur, self._q, info))

    def load_workers(self) -> list[WorkerInfo]:
        return self._read("load_workers", lambda cur: worker_rows.load(cur, self._q))

    def delete_worker(self, worker_id: str) -> bool:
        return self._run("delete_worker", lambda cur: worker_rows.delete(cur, self._q, worker_id))

    def prune_workers(self, last_seen_before: datetime) -> int:
        return self._run(
            "prune_workers", lambda cur: worker_rows.prune(cur, self._q, last_seen_before)
        )

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        now = self._now_param()
        row = writes.new_row(job, self._channel, now)
        q, locks = self._q, self._locks
        if enqueues_before_inline_run(job):

            def follow(cur: Tx) -> InlineClaimResult:
                # The pending slot decides: a pending follower already covers the work.
                enq = writes.enqueue(cur, q, job, row, locks)
                if enq.job_id is None:
                    return InlineClaimResult(None, None, enq.coalesced)
                params = {"job_id": enq.job_id, "now": now}
                handles = self._claim_in(cur, q.claim_by_id, params, 1, lease_owner)
                if not handles:  # the key has an active run: the new job is its follower
                    return InlineClaimResult(None, enq.job_id)
                return InlineClaimResult(handles[0])

            return self._run("claim_or_enqueue", follow, repeatable=False)
        values = {**row, "token": uuid.uuid4().hex, "owner": lease_owner}

        def create(cur: Tx) -> InlineClaimResult:
            if job.dedupe_key is not None:
                writes.lock_key(cur, q, locks, job.dedupe_key)
                writes.check_scope(cur, q, job)
            made = reads.one(cur, q.insert_active, values)
            if made is None:
                return InlineClaimResult(None, None, writes.slot_taken(cur, q, job, row).coalesced)
            return InlineClaimResult(handle_for(codec.to_job(made), values["token"], self))

        return self._run("claim_or_enqueue", create, repeatable=False)

    # -- claiming -------------------------------------------------------------------------
    def _claim_in(
        self,
        cur: Tx,
        statement: str,
        params: dict[str, Any],
        limit: int,
        owner: str,
        starting: int | None = None,
    ) -> list[JobHandle[Any]]:
        first = limit if starting is None else min(max(starting, 0), limit)
        cur.execute(statement, {**params, "limit": limit, "owner": owner, "starting": first})
        rows = sorted(cur.fetchall(), key=lambda r: (r["priority"], r["run_at"], r["seq"]))
        return [handle_for(codec.to_job(r), r["claim_token"], self) for r in rows]

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        """Claim up to ``limit`` due jobs of ``type`` in one statement (``UPDATE ... WHERE
        seq IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING ...``), those past the
        first ``starting`` reserved. Not repeated after a dropped connection: the claim
        may have committed, and the reaper gives such jobs back."""
        now = self._now_param()
        params = {"type": type, "now": now}
        statement, rs = self._q.claim_due, self._rates
        left = None
        if self._limited.has_limit(type, self._limited_types):
            left = self._read("claim", lambda cur: rates.allowance(cur, rs, type, now))
            if left is None:
                self._limited.note(type, False)  # removed by another process
        if left is not None and not left.left:
            return []  # the window is full: a read, nothing written, until the next one

        def limited(cur: Tx) -> list[JobHandle[Any]]:
            # With room in the window: lock the type's row, recount, claim, count.
            allowed = rates.allowance(cur, rs, type, now, lock=True)
            n = limit if allowed is None else min(limit, allowed.left)
            if not n:
                return []
            handles = self._claim_in(cur, statement, params, n, lease_owner, starting)
            if allowed is not None and handles:
                rates.count(cur, rs, type, allowed, len(handles))
            return handles

        for attempt in range(_SLOT_RACES):
            try:
                if left is None:
                    return self._run(
                        "claim",
                        lambda cur: self._claim_in(
                            cur, statement, params, limit, lease_owner, starting
                        ),
                        repeatable=False,
                        transaction=False,
                    )
                return self._run("claim", limited, repeatable=False)
            except DurablError as exc:
                # Two claimers took the last slot of a concurrency key at once: the unique
                # index refused this statement whole (nothing claimed); claim again.
                if not isinstance(exc.__cause__, UniqueViolation) or attempt == _SLOT_RACES - 1:
                    raise
        return []  # not reached

    # -- flow control (durabl.stores.postgres.rates) -----------------------------------
    def _limited_types(self) -> list[str]:
        rs = self._rates
        return self._read("claim", lambda cur: rates.limited_types(cur, rs))

    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        rs = self._rates
        self._run("set_rate_limit", lambda cur: rates.write(cur, rs, type, rate))
        self._limited.note(type, rate is not None)

    def read_rate_limit(self, type: str) -> RateLimit | None:
        rs = self._rates
        return self._read("get_rate_limit", lambda cur: rates.read(cur, rs, type))

    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        """One statement for every claim in ``claims``."""
        if not claims:
            return
        params = {"ids": [i for i, _ in claims], "tokens": [t for _, t in claims]}
        statement = self._q.mark_started
        self._run("mark_started", lambda cur: cur.execute(statement, params), transaction=False)

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        params = {"type": type, "key": dedupe_key, "now": self._now_param()}
        statement = self._q.claim_by_key
        handles = self._run(
            "claim_next_by_key",
            lambda cur: self._claim_in(cur, statement, params, 1, lease_owner),
            repeatable=False,
            transaction=False,
        )
        return handles[0] if handles else None

    # -- fenced writes --------------------------------------------------------------------
    def _fence_params(self, job_id: str, token: str) -> dict[str, Any]:
        return {**writes.fence(job_id, token), "now": self._now_param()}

    def _resolve_miss(self, tx: Tx, job_id: str, token: str, op: str) -> JobResult:
        return writes.resolve_miss(tx, self._q, job_id, token, op)

    def _record_applied(self, tx: Tx, applied: base.AppliedWrite) -> None:
        job_id, token, op, result, logs = applied
        writes.add_logs(tx, self._q, [(job_id, entry) for entry in logs])
        writes.add_receipt(tx, self._q, job_id, token, op, result)

    def _in_write(self, op: str, write: Callable[[Tx], R], timeout: float | None) -> R:
        # Repeatable: a repeat after a lost connection misses the fence and is answered
        # from the receipt.
        return self._run(op, write, timeout=timeout)

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> model.HeartbeatResult:
        """Renew the lease (one statement without logs). A beat that carries logs is not
        repeated after a dropped connection (its logs could be stored twice)."""
        params = {**writes.fence(job_id, token), "now": self._now_param()}
        q = self._q

        def beat(cur: Tx) -> model.HeartbeatResult:
            row = reads.one(cur, q.heartbeat, params)
            if row is None:
                return "lease-lost"
            writes.add_logs(cur, q, [(job_id, entry) for entry in logs])
            return "applied" if row["cancel_requested"] is None else "cancel-requested"

        return self._run("heartbeat", beat, repeatable=not logs, transaction=bool(logs))

    def write_completions(self, op: str, completions: Sequence[base.Completion]) -> list[JobResult]:
        """One UPDATE for every completion, each fenced on its own token."""
        now, q = self._now_param(), self._q
        with_logs = any(c.logs for c in completions)
        return self._run(
            op,
            lambda cur: writes.complete_many(cur, q, completions, now),
            # One statement, unless logs follow it or a miss needs explaining.
            transaction=with_logs or len(completions) > 1,
        )

    def write_failure(
        self, job_id: str, token: str, failure: base.Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        q, reason, kind, retry_at = self._q, failure.reason, failure.kind, failure.retry_at

        def apply(cur: Tx, params: dict[str, Any]) -> model.ResultStatus | None:
            if retry_at is not None:
                return writes.fail(
                    cur,
                    q,
                    params,
                    reason,
                    retry_at,
                    kind,
                    error=failure.error,
                    terminal_outcome=failure.terminal_outcome,
                )
            done = writes.terminal(
                cur,
                q,
                params,
                "failed",
                outcome=failure.terminal_outcome,
                error=failure.error,
                reason=reason,
                kind=kind,
            )
            return "failed-terminal" if done else None

        return self._fenced(failure.op, job_id, token, logs, apply)

    def write_release(
        self, job_id: str, token: str, release: base.Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        """Back to pending at its old ``run_at`` (or at ``release.run_at``), refunding the
        attempt. The timeout bounds the pool wait, each statement and the retries."""
        q = self._q

        def apply(cur: Tx, params: dict[str, Any]) -> model.ResultStatus | None:
            row = writes.locked_claim(cur, q, params)
            if row is None:
                return None
            if row["cancel_requested"] is not None:  # not back to pending: it was cancelled
                return writes.end_cancelled(cur, q, params, row["cancel_requested"])
            return writes.to_pending_or_supersede(
                cur,
                q,
                params,
                row["followed"],
                "released",
                refund=True,
                run_at=release.run_at,
                outcome="released",
            )

        return self._fenced("release", job_id, token, logs, apply, timeout=release.timeout)

    def write_cancel(self, job_id: str, reason: str) -> model.CancelOutcome:
        params, q = {"id": job_id, "reason": reason, "now": self._now_param()}, self._q
        return self._run("cancel", lambda cur: writes.cancel(cur, q, params))

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        q = self._q

        def apply(cur: Tx, params: dict[str, Any]) -> model.ResultStatus | None:
            row = writes.locked_claim(cur, q, params)
            if row is None:
                return None
            return writes.end_cancelled(cur, q, params, row["cancel_requested"])

        return self._fenced("cancel", job_id, token, logs, apply)

    def append_journal(
        self, job_id: str, token: str, records: Sequence[model.JournalRecord], *, position: int
    ) -> model.JournalAppendResult:
        """One statement appends to the stored array when it holds ``position`` entries."""
        params, q = writes.fence(job_id, token), self._q
        entries = [dict(r) for r in records]

        def write(cur: Tx) -> model.JournalAppendResult:
            applied = writes.append_journal(cur, q, params, entries, position)
            return "applied" if applied else "lease-lost"

        return self._run("append_journal", write)

    # -- recovery -------------------------------------------------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> model.ReapReport:
        """Recover up to ``limit`` expired leases, oldest first, in one transaction; leases
        another reaper holds are skipped (SKIP LOCKED)."""
        now, q = self._now_param(), self._q
        params = {
            "now": now,
            "timeout": float(visibility_timeout + self.clock_skew_allowance),
            "limit": max(limit, 0),
        }

        return self._run("reap", lambda cur: writes.reap(cur, q, params, limit))

    # -- queries and operations -----------------------------------------------------------
    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        params = {"type": type, "key": dedupe_key}
        return self._read(
            "has_outstanding",
            lambda cur: reads.one(cur, self._q.has_outstanding, params) is not None,
        )

    def get_job(self, job_id: str) -> Job[Any] | None:
        row = self._read("get_job", lambda cur: reads.one(cur, self._q.get_job, {"id": job_id}))
        return None if row is None else codec.to_job(row)

    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        statement, values = self.listing_statement(filters, page)

        def read(cur: Tx) -> list[DictRow]:
            cur.execute(statement, values)
            return cur.fetchall()

        return [codec.to_job(row) for row in self._read("list_jobs", read)]

    def listing_statement(self, filters: JobFilter, page: JobPage) -> tuple[str, dict[str, Any]]:
        """The SELECT of ``find_jobs`` and its parameters (the query-plan tests read it)."""
        walked = page.newest is not None
        where, params = reads.filters(filters, self._q, page.newest, walked=walked)
        source = reads.walk_source(filters, self._q) if walked else None
        order = page.order
        if order is not None:
            by = order_by(order.field, order.descending, filters.status)
        else:
            by = reads.default_order(filters)
        values = {**params, "limit": page.limit or None, "offset": page.offset}
        return self._q.listing(self._q.list_jobs, where, by, source), values

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        where, params = reads.filters(filters, self._q, newest)
        if at_most is None:
            statement = self._q.listing(self._q.count_jobs, where)
        else:
            statement = self._q.listing(self._q.count_jobs_at_most, where)
            params = {**params, "at_most": at_most}
        row = self._read("count_jobs", lambda cur: reads.one(cur, statement, params))
        return 0 if row is None else int(row["n"])

    def retry(self, job_id: str) -> bool:
        """failed -> pending, due now, attempts 0. False when the job is not failed or its
        key is live (under either scope)."""
        now, q, locks = self._now_param(), self._q, self._locks
        return self._run(
            "retry", lambda cur: writes.retry(cur, q, job_id, now, locks), repeatable=False
        )

    def retry_selected(self, filters: JobFilter) -> int:
        """Each selected job as :meth:`retry` would, oldest first, in one transaction."""
        where, params = reads.filters(filters, self._q)
        now, q, locks = self._now_param(), self._q, self._locks
        select = q.listing(q.matching_ids, where)

        def write(cur: Tx) -> int:
            cur.execute(select, params)
            ids = [row["id"] for row in cur.fetchall()]
            return sum(writes.retry(cur, q, job_id, now, locks) for job_id in ids)

        return self._run("retry_matching", write, repeatable=False)

    def delete_selected(self, filters: JobFilter) -> int:
        where, params = reads.filters(filters, self._q)
        statement = self._q.listing(self._q.delete_matching, where)
        row = self._run(
            "delete_matching", lambda cur: reads.one(cur, statement, params), repeatable=False
        )
        return 0 if row is None else int(row["n"])

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        """Two statements (pending, then active) in one transaction."""
        where, params = reads.filters(filters, self._q)
        values, q = {**params, "reason": reason, "now": self._now_param()}, self._q
        return self._run(
            "cancel_matching",
            lambda cur: writes.cancel_matching(cur, q, where, values),
            repeatable=False,
        )

    def run_now(self, job_id: str) -> bool:
        params, q = {"id": job_id, "now": self._now_param()}, self._q

        def write(cur: Tx) -> bool:
            if writes.run_now(cur, q, "j.id = %(id)s", params):
                return True
            return reads.one(cur, q.pending_exists, params) is not None

        return self._run("run_now", write)

    def run_now_selected(self, filters: JobFilter) -> int:
        where, params = reads.filters(filters, self._q)
        values, q = {**params, "now": self._now_param()}, self._q
        return self._run(
            "run_now_matching", lambda cur: writes.run_now(cur, q, where, values), repeatable=False
        )

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        params = {"statuses": list(statuses), "age": older_than, "now": self._now_param()}
        q = self._q

        def prune(cur: Tx) -> int:
            cur.execute(q.prune, params)
            return cur.rowcount

        return self._run("prune", prune)

    def delete(self, job_id: str) -> bool:
        statement = self._q.delete
        row = self._run(
            "delete",
            lambda cur: reads.one(cur, statement, {"id": job_id}),
            repeatable=False,
            transaction=False,
        )
        return row is not None

    def get_stats(self, type: str | None = None) -> model.QueueStats:
        params = {"type": type, "now": self._now_param()}
        q = self._q
        return self._run("get_stats", lambda cur: reads.stats(cur, q, params))

    def stats_by_type(self) -> dict[str, model.QueueStats]:
        now, q = self._now_param(), self._q
        return self._run("stats_by_type", lambda cur: reads.stats_by_type(cur, q, now))

    def find_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        q = self._q
        return self._run("read_activity", lambda cur: reads.activity_read(cur, q, window, types))

    def job_types(self) -> list[str]:
        def read(cur: Tx) -> list[str]:
            cur.execute(self._q.job_types)
            return [row["type"] for row in cur.fetchall()]

        return self._read("job_types", read)
