"""PostgresJobQueue: the whole Backend contract on a PostgreSQL server, across processes
and machines: the shared SQL store (:mod:`durabl.stores.sql`) on psycopg, with the server's
clock, LISTEN/NOTIFY push pickup and enqueues inside a caller's transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg import Cursor
from psycopg.errors import UniqueViolation
from psycopg.rows import DictRow

from durabl.model.activity import ActivityWindow
from durabl.model.clock import SYSTEM_CLOCK, Clock, as_utc
from durabl.model.exceptions import DurablError
from durabl.model.flow import LimitedTypes, RateLimit
from durabl.model.job import STATUSES, Job, JobFilter, JobHandle
from durabl.model.options import DEFAULT_POLL_INTERVAL, MAX_LOG_ENTRIES, NewJob
from durabl.model.payload import to_millis
from durabl.model.rules import JobPage
from durabl.model.tagged_json import encode_payload
from durabl.stores import base, push
from durabl.stores.base import Completion, EnqueueResult
from durabl.stores.postgres import bulk, codec, reads, schema
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
from durabl.stores.postgres.queries import order_by
from durabl.stores.postgres.sql import Queries
from durabl.stores.sql import rates
from durabl.stores.sql.reads import Reading, default_order, where_clause
from durabl.stores.sql.store import SqlStore
from durabl.stores.sql.writes import COMPLETION, LogBatches

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

R = TypeVar("R")
Tx = Cursor[DictRow]
#: How often a claim is repeated after losing the race for the last slot of a key.
_SLOT_RACES = 5
#: The constructor's defaults for the options a URL may also give (``store_options``).
_KEYWORD_DEFAULTS: dict[str, object] = {
    "prepare_threshold": 5,
    "pool_min_size": 1,
    "pool_max_size": 10,
    "listen_notify": True,
    "safety_poll_interval": DEFAULT_POLL_INTERVAL,
}


class PostgresJobQueue(SqlStore[Tx]):
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

    sql: Queries
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
        self.sql = Queries.for_tables(self.tables.names())
        self.filter_sql = reads.filter_sql(self.sql)
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
        """The instant statements use: the injected clock's, or None (the server's: one
        clock for every process, where SQLite reads the process's own)."""
        return None if self._clock is None else to_millis(self._clock.now())

    def now(self) -> datetime:
        if self._clock is not None:
            return to_millis(self._clock.now())
        statement = self.sql.server_now
        row = self._run(
            "now",
            lambda cur: cur.execute(statement, {"now": None}).fetchone(),
            write=False,
            single=True,
        )
        assert row is not None
        return as_utc(row["now"])

    def _instant(self, value: datetime) -> datetime | None:
        return codec.instant(value)

    def _from_instant(self, value: Any) -> datetime:
        return as_utc(value)

    def _fence(self, job_id: str, token: str) -> dict[str, Any]:
        # Arrays: the fence of a completion batch is the same, over every (id, token) pair.
        return {"ids": [job_id], "tokens": [token]}

    def _run(
        self,
        operation: str,
        fn: Callable[[Tx], R],
        *,
        write: bool = True,
        single: bool = False,
        repeatable: bool = True,
        timeout: float | None = None,
    ) -> R:
        # A single statement runs alone on an autocommit connection (no BEGIN and COMMIT
        # round trips); ``write`` changes nothing here.
        if not self._started:
            self.startup()
        return self._db.run(
            operation, fn, repeatable=repeatable, transaction=not single, timeout=timeout
        )

    def startup(self) -> None:
        """Create or upgrade the schema: the pending migrations in one transaction under a
        transaction-level advisory lock, each skipped by whoever finds it already applied.
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
            pending = schema.pending_migrations(version, t)
            if pending:
                self._db.run(
                    "schema migrations",
                    lambda cur: schema.apply_migrations(cur, pending, t),
                    repeatable=True,
                )
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
        clock = self._clock
        return NotifyListener(
            self._db.direct_connector(),
            listener,
            channel=self.tables.channel,
            next_due=self._next_due,
            monotonic=time.monotonic if clock is None else clock.monotonic,
            settings=self.listen_settings,
            where=self._db.where,
        )

    def _next_due(self, types: Sequence[str]) -> dict[str, float]:
        """Seconds until the earliest future ``run_at`` of each of ``types`` that has one."""
        params = {"types": list(types), "now": self._now_param()}
        statement = self.sql.next_due

        def read(cur: Tx) -> dict[str, float]:
            rows = cur.execute(statement, params).fetchall()
            return {row["type"]: row["delay_ms"] / 1000.0 for row in rows}

        return self._run("next_due", read, write=False, single=True)

    # -- rows -----------------------------------------------------------------------------
    def _new_row(self, job: NewJob, now: datetime | None) -> dict[str, Any]:
        return codec.new_row(job, now)

    def _job(self, row: DictRow) -> Job[Any]:
        return codec.to_job(row)

    def _jobs(self, tx: Tx, rows: list[DictRow]) -> list[Job[Any]]:
        return [codec.to_job(row) for row in rows]  # each row carries its logs

    def _add_logs(self, tx: Tx, batches: LogBatches) -> None:
        """Every job's entries in one statement, then one trim of every job's oldest."""
        params = codec.log_params((job_id, e) for job_id, logs in batches for e in logs)
        if not params["job_ids"]:
            return
        tx.execute(self.sql.add_logs, params)
        trim = {"job_ids": sorted(set(params["job_ids"])), "keep": MAX_LOG_ENTRIES}
        tx.execute(self.sql.trim_logs, trim)

    # -- enqueue --------------------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        if self.enqueue_connection is not None:
            connection = self.enqueue_connection()
            if connection is not None:
                return self.insert_through(job, connection)
        return super().enqueue(job)

    def insert_through(self, job: NewJob, connection: object) -> EnqueueResult:
        """The enqueue's statements (the NOTIFY included) on the caller's ``connection``,
        under a savepoint inside its transaction: the NOTIFY fires and workers see the job
        when the caller commits, and a scope conflict or a failed statement rolls back only
        the savepoint. A keyed job holds its key's lock until the caller's transaction
        ends, so other enqueues of that key wait for it."""
        conn = caller_connection(connection)
        if not self._started:
            self.startup()
        row = codec.new_row(job, self._now_param())
        return run_in_caller_transaction(
            conn, "enqueue", lambda cur: self._enqueue_in(cur, job, row), self._db.where
        )

    def insert_many(self, jobs: Sequence[NewJob]) -> list[str | None]:
        """Through the caller's connection where ``enqueue_connection`` gives one (as
        :meth:`enqueue`), else in a transaction of the store's own."""
        connection = None if self.enqueue_connection is None else self.enqueue_connection()
        if connection is None:
            return super().insert_many(jobs)
        rows = self._new_rows(jobs)
        return run_in_caller_transaction(
            caller_connection(connection),
            "enqueue_many",
            lambda cur: self._insert_many_in(cur, jobs, rows),
            self._db.where,
        )

    def _key_list(self, keys: list[str]) -> list[str]:
        return keys

    def _insert_rows(self, tx: Tx, rows: list[dict[str, Any]]) -> list[str | None]:
        return bulk.insert_rows(tx, self.sql, rows)  # one statement over arrays

    # -- claiming -------------------------------------------------------------------------
    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        """Claim up to ``limit`` due jobs of ``type`` in one statement (``UPDATE ... WHERE
        seq IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING ...``), those past the
        first ``starting`` reserved. Not repeated after a dropped connection: the claim
        may have committed, and the reaper gives such jobs back. A type the store object
        knows has no rate limit reads no window (:class:`~durabl.model.flow.LimitedTypes`);
        a full window is a read, nothing written, until the next one."""
        now = self._now_param()
        params = {"type": type, "now": now, "owner": lease_owner}
        left = None
        if self._limited.has_limit(type, self._limited_types):
            left = self._run(
                "claim",
                lambda cur: rates.allowance(cur, self.sql, type, now),
                write=False,
                single=True,
            )
            if left is None:
                self._limited.note(type, False)  # removed by another process
        if left is not None and not left.left:
            return []

        for attempt in range(_SLOT_RACES):
            try:
                if left is None:
                    return self._run(
                        "claim",
                        lambda cur: self._claim_batch(cur, params, limit, starting),
                        single=True,
                        repeatable=False,
                    )
                return self._run(
                    "claim",
                    lambda cur: self._claim_within_rate(cur, params, limit, starting),
                    repeatable=False,
                )
            except DurablError as exc:
                # Two claimers took the last slot of a concurrency key at once: the unique
                # index refused this statement whole (nothing claimed); claim again.
                if not isinstance(exc.__cause__, UniqueViolation) or attempt == _SLOT_RACES - 1:
                    raise
        return []  # not reached

    def _claim_batch(
        self, tx: Tx, params: dict[str, Any], limit: int, starting: int | None
    ) -> list[JobHandle[Any]]:
        # One statement marks those past ``starting`` reserved (SQLite needs a second).
        first = limit if starting is None else min(max(starting, 0), limit)
        values = {**params, "limit": limit, "starting": first}
        return self._claim_in(tx, self.sql.claim_due, values)

    def _limited_types(self) -> list[str]:
        return self._run(
            "claim", lambda cur: rates.limited_types(cur, self.sql), write=False, single=True
        )

    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        super().write_rate_limit(type, rate)
        self._limited.note(type, rate is not None)

    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        """One statement for every claim in ``claims``."""
        if not claims:
            return
        params = {"ids": [i for i, _ in claims], "tokens": [t for _, t in claims]}
        statement = self.sql.mark_started
        self._run("mark_started", lambda cur: cur.execute(statement, params), single=True)

    # -- fenced writes --------------------------------------------------------------------
    def _complete(self, tx: Tx, completions: Sequence[Completion], now: Any) -> list[bool]:
        """One statement completes every job whose fence holds, each on its own token (the
        batch joined row by row, with arrays)."""
        params = {
            "ids": [c.job_id for c in completions],
            "tokens": [c.token for c in completions],
            "results": [
                None if c.result is None else encode_payload(c.result) for c in completions
            ],
            "now": now,
            **COMPLETION,
        }
        done = {
            (r["id"], r["done_token"]) for r in tx.execute(self.sql.complete, params).fetchall()
        }
        return [(c.job_id, c.token) in done for c in completions]

    def _reap_params(self, visibility_timeout: float, limit: int) -> dict[str, Any]:
        # The cutoff is the server's ``now`` less the timeout (or the injected clock's).
        return {
            "now": self._now_param(),
            "timeout": float(visibility_timeout),
            "limit": max(limit, 0),
        }

    # -- reads ----------------------------------------------------------------------------
    def listing_statement(self, filters: JobFilter, page: JobPage) -> tuple[str, dict[str, Any]]:
        """The SELECT of ``find_jobs`` and its parameters (the query-plan tests read it)."""
        walked = page.newest is not None
        where, params = where_clause(filters, self.filter_sql, page.newest, walked=walked)
        source = reads.walk_source(filters, self.sql, self.filter_sql) if walked else None
        order = page.order
        if order is not None:
            by = order_by(order.field, order.descending, filters.status)
        else:
            by = default_order(filters, self.filter_sql)
        values = {**params, "limit": page.limit or None, "offset": page.offset}
        return self.sql.listing(self.sql.list_jobs, where, by, source), values

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        params = {"statuses": list(statuses), "age": older_than, "now": self._now_param()}
        statement = self.sql.prune
        return self._run("prune", lambda cur: cur.execute(statement, params).rowcount, single=True)

    # Arrays of every type at once (unnest), where SQLite writes a term per type.
    def _types_stats(self, types: Sequence[str], now: Any) -> tuple[str, str, dict[str, Any]]:
        params = {"types": list(types), "statuses": list(STATUSES), "now": now}
        return self.sql.stats_by_type_counts, self.sql.stats_by_type_oldest, params

    def _activity_counts(self, window: ActivityWindow, types: Sequence[str]) -> Reading:
        return self.sql.activity_counts, reads.activity_params(window, types)

    def _activity_candidates(self, window: ActivityWindow, types: Sequence[str]) -> Reading:
        return self.sql.activity_candidates, reads.activity_params(window, types)
