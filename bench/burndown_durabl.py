"""durabl's side of the burn-down: opening each store, storing the backlog, the worker
process, and what the database weighs.

**How the backlog is stored.** Through the public API: ``queue.enqueue_many`` in calls of
``INSERT_BATCH`` jobs, which the store writes in chunks of 1,000 (SQLite: one transaction
each; PostgreSQL: one ``INSERT ... SELECT FROM unnest(...)`` each, with one NOTIFY;
MongoDB: one unordered ``insert_many`` each). Each run's ``insert_method`` says so.

**Workers.** Each process opens its own store and ``JobQueue(backend, retention=R)``,
counts each ``completed`` event (sent once the completion is written) in its own counter
slot, and runs ``queue.process("noop", handler, concurrency=T)`` with a no-op handler.
Process 0 also runs the reaper (``start_reaper(interval)``), whose sweeps prune the jobs
finished more than R seconds ago.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from burndown_harness import Signals

NOOP = "noop"
TABLE = "durabl_jobs"
INSERT_BATCH = 10_000
SHUTDOWN_TIMEOUT = 20.0


# -- opening a store --------------------------------------------------------------------------
def open_backend(spec: Mapping[str, Any]) -> Any:
    store = spec["store"]
    if store == "sqlite":
        from durabl import SqliteJobQueue

        return SqliteJobQueue(spec["path"])
    if store == "postgres":
        from durabl import PostgresJobQueue

        return PostgresJobQueue(spec["url"], table=spec["table"])
    if store == "mongo":
        from pymongo import MongoClient

        from durabl import MongoJobQueue

        client: Any = MongoClient(spec["url"])
        return MongoJobQueue(client[spec["database"]], owns_client=True)
    raise ValueError(f"unknown store {store!r}")


def durabl_worker(index: int, threads: int, signals: Signals, spec: Mapping[str, Any]) -> None:
    """One worker process (see the module's docstring)."""
    from durabl import Job, JobContext, JobEvent, JobQueue

    queue = JobQueue(open_backend(spec), retention=spec["retention"])
    queue.startup()
    slot = index * threads  # the completer thread is the only writer of this slot
    lock = threading.Lock()

    def count(event: JobEvent) -> None:
        with lock:
            signals.counts[slot] += 1

    def handler(job: Job[Any], ctx: JobContext) -> None:
        """The no-op job."""

    queue.add_event_sink(count, kinds={"completed"})
    if index == 0 and spec["retention"] is not None:
        queue.start_reaper(interval=spec["reaper_interval"])
    signals.ready[index] = 1
    signals.go.wait()
    queue.process(NOOP, handler, concurrency=threads)
    signals.stop.wait()
    try:
        queue.shutdown(timeout=SHUTDOWN_TIMEOUT)
    finally:
        queue.backend.close()


INSERT_METHOD = f"queue.enqueue_many, {INSERT_BATCH:,} jobs per call (chunks of 1,000)"


def enqueue_backlog(spec: Mapping[str, Any], jobs: int) -> float:
    """Store ``jobs`` no-op jobs with ``enqueue_many``: the seconds it took."""
    from durabl import JobQueue

    backend = open_backend(spec)
    queue = JobQueue(backend)
    queue.startup()
    began = time.perf_counter()
    try:
        for start in range(0, jobs, INSERT_BATCH):
            end = min(start + INSERT_BATCH, jobs)
            ids = queue.enqueue_many([(NOOP, {"i": i}) for i in range(start, end)])
            assert all(ids), "a no-op job without a dedupe key is always stored"
        return time.perf_counter() - began
    finally:
        queue.shutdown(timeout=SHUTDOWN_TIMEOUT)
        backend.close()


# -- SQLite -----------------------------------------------------------------------------------
class SqliteRun:
    store = "sqlite"
    insert_method = INSERT_METHOD

    def server_root(self) -> int | None:
        return None  # SQLite runs inside the worker processes

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "burndown.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self.spec: dict[str, Any] = {"store": "sqlite", "path": str(self.path)}

    def insert(self, jobs: int) -> float:
        return enqueue_backlog(self.spec, jobs)

    def sample(self) -> dict[str, Any]:
        sizes = {s or "db": _size(Path(f"{self.path}{s}")) for s in ("", "-wal")}
        return {"db_bytes": sizes["db"], "wal_bytes": sizes["-wal"]}

    def final(self) -> dict[str, Any]:
        with sqlite3.connect(self.path) as conn:
            left = conn.execute(
                f"SELECT count(*) FROM {TABLE} WHERE status IN ('pending', 'active')"
            ).fetchone()[0]
            rows = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        return {
            "unfinished": left,
            "rows_left": rows,
            "pages": pages,
            "free_pages": free,
            "page_size": page_size,
            **self.sample(),
        }

    def settings(self) -> dict[str, Any]:
        with sqlite3.connect(self.path) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return {"journal_mode": mode, "synchronous": "NORMAL (SqliteJobQueue default)"}

    def cleanup(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# -- PostgreSQL -------------------------------------------------------------------------------
PG_STATS = """
SELECT n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
       autovacuum_count, autoanalyze_count,
       pg_relation_size(relid) AS table_bytes, pg_indexes_size(relid) AS index_bytes,
       pg_total_relation_size(relid) AS total_bytes
FROM pg_stat_user_tables WHERE relid = %s::regclass
"""
SCHEMA_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'
"""


PG_STAT_NAMES = (
    "live_tuples",
    "dead_tuples",
    "inserted",
    "updated",
    "hot_updated",
    "deleted",
    "autovacuums",
    "autoanalyzes",
    "table_bytes",
    "index_bytes",
    "total_bytes",
)


def pg_table_stats(conn: Any, table: str, schema: str) -> dict[str, Any]:
    """A job table's tuple counters and sizes (``PG_STAT_NAMES``), and its schema's size."""
    row = conn.execute(PG_STATS, (table,)).fetchone()
    stats = dict(zip(PG_STAT_NAMES, row, strict=True)) if row else {}
    stats["schema_bytes"] = int(conn.execute(SCHEMA_BYTES, (schema,)).fetchone()[0])
    return stats


class PostgresRun:
    store = "postgres"
    insert_method = INSERT_METHOD

    def __init__(self, url: str, table_options: str = "", vacuum_every: float = 0.0) -> None:
        from peers.pg import connect

        self.url = url
        #: seconds between the harness's own ``VACUUM`` of the job table (0: never), for
        #: a server where autovacuum is off: what a vacuum cadence buys, measured
        self.vacuum_every = vacuum_every
        self._vacuum_stop = threading.Event()
        self._vacuums: list[tuple[float, float]] = []  # (started, seconds), monotonic
        #: per-table storage parameters (e.g. autovacuum_vacuum_scale_factor=0.01), set
        #: with ALTER TABLE ... SET (...) on this run's own job table after startup
        self.table_options = table_options
        self.schema = f"bench_burndown_{uuid.uuid4().hex[:8]}"
        self.table = f"{self.schema}.{TABLE}"
        with connect() as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        self.spec: dict[str, Any] = {"store": "postgres", "url": url, "table": self.table}
        self._conn = connect()

    def insert(self, jobs: int) -> float:
        if self.table_options:
            backend = open_backend(self.spec)
            backend.startup()
            backend.close()
            self._conn.execute(f"ALTER TABLE {self.table} SET ({self.table_options})")
        seconds = enqueue_backlog(self.spec, jobs)
        self._conn.execute(f"ANALYZE {self.table}")
        return seconds

    def sample(self) -> dict[str, Any]:
        stats = pg_table_stats(self._conn, self.table, self.schema)
        stats["vacuums"] = len(self._vacuums)
        return stats

    def start_vacuuming(self) -> None:
        """With ``vacuum_every``: a thread that runs ``VACUUM`` on the job table (and its
        logs and receipts tables) every ``vacuum_every`` seconds, on its own connection."""
        if not self.vacuum_every:
            return
        from peers.pg import connect

        def loop() -> None:
            with connect() as conn:
                while not self._vacuum_stop.wait(self.vacuum_every):
                    began = time.monotonic()
                    conn.execute(f"VACUUM {self.table}")
                    self._vacuums.append((began, time.monotonic() - began))

        threading.Thread(target=loop, name="vacuum", daemon=True).start()

    def final(self) -> dict[str, Any]:
        self._vacuum_stop.set()
        left = self._conn.execute(
            f"SELECT count(*) FROM {self.table} WHERE status IN ('pending', 'active')"
        ).fetchone()[0]
        rows = self._conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0]
        return {"unfinished": left, "rows_left": rows, **self.sample()}

    def server_root(self) -> int | None:
        return postmaster_of(self._conn)

    def settings(self) -> dict[str, Any]:
        return {
            **pg_settings(self._conn),
            "table_options": self.table_options or None,
            "harness_vacuum_every_s": self.vacuum_every or None,
            "harness_vacuum_seconds": [round(s, 2) for _, s in self._vacuums],
        }

    def cleanup(self) -> None:
        try:
            self._conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        finally:
            self._conn.close()


def postmaster_of(conn: Any) -> int | None:
    """The postmaster of the server ``conn`` reaches, when it runs on this machine: the
    parent of this connection's backend."""
    from burndown_harness import parent_of
    from peers.pg import local_server

    if not local_server():
        return None
    return parent_of(int(conn.execute("SELECT pg_backend_pid()").fetchone()[0]))


def pg_settings(conn: Any) -> dict[str, Any]:
    names = [
        "server_version",
        "synchronous_commit",
        "fsync",
        "shared_buffers",
        "max_connections",
        "autovacuum",
        "autovacuum_naptime",
        "autovacuum_vacuum_scale_factor",
        "autovacuum_vacuum_threshold",
        "autovacuum_vacuum_insert_scale_factor",
        "autovacuum_vacuum_cost_limit",
        "autovacuum_vacuum_cost_delay",
    ]
    return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


# -- MongoDB on the wire server ---------------------------------------------------------------
class MongoRun:
    store = "mongo"
    insert_method = INSERT_METHOD

    def __init__(self, url: str, server_pid: int | None = None) -> None:
        from pymongo import MongoClient

        self.url = url
        self.server_pid = server_pid
        self.database = f"burndown_{uuid.uuid4().hex[:8]}"
        self.spec: dict[str, Any] = {"store": "mongo", "url": url, "database": self.database}
        self._client: Any = MongoClient(url)

    def insert(self, jobs: int) -> float:
        return enqueue_backlog(self.spec, jobs)

    def sample(self) -> dict[str, Any]:
        try:
            stats = self._client[self.database].command("dbstats")
        except Exception as exc:  # the wire server may not answer dbstats
            return {"dbstats": f"unavailable: {type(exc).__name__}"}
        keys = ("objects", "dataSize", "storageSize", "indexSize")
        return {k: stats.get(k) for k in keys}

    def final(self) -> dict[str, Any]:
        col = self._client[self.database][TABLE]
        left = col.count_documents({"status": {"$in": ["pending", "active"]}})
        return {"unfinished": left, "rows_left": col.count_documents({}), **self.sample()}

    def settings(self) -> dict[str, Any]:
        return {"server": "SecantusDB wire server (Python), :memory: storage"}

    def server_root(self) -> int | None:
        return self.server_pid

    def cleanup(self) -> None:
        try:
            self._client.drop_database(self.database)
        finally:
            self._client.close()


@contextmanager
def wire_server() -> Iterator[tuple[str, int | None]]:
    """A SecantusDB wire server started as tests/mongo_server.WireServer does: its URL and
    process id (None for the server at ``MONGO_URL``)."""
    import sys

    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    if os.environ.get("MONGO_URL"):
        yield os.environ["MONGO_URL"], None
        return
    from tests.mongo_server import WireServer

    server = WireServer.start()
    try:
        yield server.url, server.process.pid
    finally:
        server.stop()
