"""SqliteJobQueue: the embedded backend, one SQLite file in WAL mode, shared by threads and
processes. The same contract as :class:`durabl.MongoJobQueue`; a cheap change check on the
file stands in for change streams."""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote

from durabl.model.clock import SYSTEM_CLOCK, Clock, Seconds, to_seconds
from durabl.model.exceptions import DurablError
from durabl.model.job import Job, JobHandle
from durabl.model.options import DEFAULT_POLL_INTERVAL, NewJob
from durabl.model.payload import to_millis
from durabl.stores import base
from durabl.stores.base import Completion
from durabl.stores.sql.store import SqlStore
from durabl.stores.sql.writes import COMPLETION, LogBatches
from durabl.stores.sqlite import codec, queries, schema, writes
from durabl.stores.sqlite.connection import SYNCHRONOUS_MODES, Connections, translate
from durabl.stores.sqlite.queries import JOBS
from durabl.stores.sqlite.watch import ChangeWatcher

R = TypeVar("R")
MIN_SQLITE = (3, 35, 0)


class SqliteJobQueue(SqlStore[sqlite3.Connection]):
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

    sql = writes.STATEMENTS
    slot_conflict = (sqlite3.IntegrityError,)
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

    def _now_param(self) -> int:
        return codec.to_ms(to_millis(self.clock.now()))

    def _instant(self, value: datetime) -> int:
        return codec.to_ms(value)

    def _from_instant(self, value: Any) -> datetime:
        return codec.from_ms(value)

    def _fence(self, job_id: str, token: str) -> dict[str, Any]:
        return {"id": job_id, "token": token}

    def _run(
        self,
        operation: str,
        fn: Callable[[sqlite3.Connection], R],
        *,
        write: bool = True,
        single: bool = False,
        repeatable: bool = True,
        timeout: float | None = None,
    ) -> R:
        # Every statement runs in a transaction here (a write in BEGIN IMMEDIATE), and one
        # is repeated only when it never got the lock: ``single`` and ``repeatable`` do
        # not matter on SQLite.
        if not self._started:
            self.startup()
        return self._db.run(operation, fn, write=write, timeout=timeout)

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

    # -- rows -----------------------------------------------------------------------------
    def _new_row(self, job: NewJob, now: int) -> dict[str, Any]:
        return writes.new_row(job, now)

    def _key_list(self, keys: list[str]) -> str:
        return json.dumps(keys)  # read back by json_each

    def _insert_rows(self, tx: sqlite3.Connection, rows: list[dict[str, Any]]) -> list[str | None]:
        """One statement per row inside the one transaction: no round trips in-process."""
        insert = self.sql.insert_pending
        return [row["id"] if tx.execute(insert, row).rowcount else None for row in rows]

    def _job(self, row: sqlite3.Row) -> Job[Any]:
        return codec.to_job(row)

    def _jobs(self, tx: sqlite3.Connection, rows: list[sqlite3.Row]) -> list[Job[Any]]:
        return queries.jobs_from_rows(tx, rows)

    def _add_logs(self, tx: sqlite3.Connection, batches: LogBatches) -> None:
        for job_id, logs in batches:  # the numbering of a job's logs is read per job
            writes.add_logs(tx, job_id, logs)

    # -- claiming -------------------------------------------------------------------------
    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        """Claim up to ``limit`` due jobs of ``type`` in one transaction: one statement, or
        two when some are read ahead (``starting`` < ``limit``)."""
        now = self._now_param()
        if not self._run("claim", lambda conn: queries.has_due(conn, type, now), write=False):
            return []  # an idle poll reads; it never queues behind writers for the lock
        params = {"type": type, "now": now, "owner": lease_owner}
        return self._run(
            "claim", lambda conn: self._claim_within_rate(conn, params, limit, starting)
        )

    def _claim_batch(
        self, tx: sqlite3.Connection, params: dict[str, Any], limit: int, starting: int | None
    ) -> list[JobHandle[Any]]:
        first = limit if starting is None else min(starting, limit)
        handles = (
            self._claim_in(tx, self.sql.claim_due, {**params, "limit": first}) if first else []
        )
        if len(handles) == first < limit:
            ahead = {**params, "limit": limit - first}
            handles += self._claim_in(tx, writes.CLAIM_DUE_RESERVED, ahead)
        return handles

    def mark_started(self, claims: Sequence[tuple[str, str]]) -> None:
        """One statement (one transaction) for every claim in ``claims``."""
        if claims:
            tokens = [token for _, token in claims]
            self._run("mark_started", lambda conn: writes.mark_started(conn, tokens))

    # -- fenced writes --------------------------------------------------------------------
    def _complete(
        self, tx: sqlite3.Connection, completions: Sequence[Completion], now: int
    ) -> list[bool]:
        applied = []
        for c in completions:
            result = None if c.result is None else codec.encode_payload(c.result)
            params = {"id": c.job_id, "token": c.token, "now": now, "result": result, **COMPLETION}
            applied.append(tx.execute(writes.COMPLETE, params).rowcount == 1)
        return applied

    def _reap_params(self, visibility_timeout: float, limit: int) -> dict[str, Any]:
        now = self.now()
        cutoff = now - timedelta(seconds=visibility_timeout)
        # heartbeat_at (whole ms) < cutoff exactly when it is < the cutoff rounded up.
        return {
            "now": codec.to_ms(now),
            "cutoff": codec.ceil_ms(cutoff),
            "limit": queries.sql_limit(limit),
        }

    # -- reads ----------------------------------------------------------------------------
    filter_sql = queries.FILTERS
    listing_statement = staticmethod(queries.listing_statement)

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        """One DELETE over the (status, finished_at) index; logs and receipts cascade."""
        before = codec.to_ms(self.now() - timedelta(seconds=older_than))
        marks = ", ".join("?" * len(statuses))
        return self._run(
            "prune",
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {JOBS} WHERE status IN ({marks}) AND finished_at < ?",
                    (*statuses, before),
                ).rowcount
            ),
        )

    # Integer-ms instants, and a statement term per type (no arrays): runs of 50 types.
    types_per_statement = queries.TYPES_PER_STATEMENT
    _types_stats = staticmethod(queries.types_stats)
    _activity_counts = staticmethod(queries.activity_counts)
    _activity_candidates = staticmethod(queries.activity_candidates)
