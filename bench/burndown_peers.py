"""The PostgreSQL peers of the burn-down, through the same harness and the same P x T:

* **raw SKIP LOCKED** (x1 and x32): the database's own ceiling. The statements and the
  table are those of ``peers/raw_skip_locked_peer.py`` (a ``FOR UPDATE SKIP LOCKED`` claim
  and an ack, one job or up to 32 per statement, autocommit, psycopg preparing both);
  here each of the P processes runs T threads with a connection each, and a thread counts
  its jobs after the ack returns. Rows are kept (status ``done``): no retention.
* **Procrastinate**: each process runs its async worker with ``concurrency=T`` and a pool
  of T + 2 connections, an ``async`` no-op task, ``wait=False`` (the worker returns once
  the backlog is drained), as ``peers/procrastinate_peer.py`` sets it up; the backlog is
  stored with ``batch_defer_async``. Done is counted by the harness from the table
  (``status = 'succeeded'``), so it counts committed finishes. Rows are kept
  (``delete_jobs`` left at ``None``, as in ``peers/``).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from burndown_durabl import pg_settings, pg_table_stats, postmaster_of
from burndown_harness import Signals
from peers.raw_skip_locked_peer import ACK, ACK_MANY, CLAIM, CLAIM_MANY, CREATE

INSERT_BATCH = 10_000


def raw_worker(index: int, threads: int, signals: Signals, spec: Mapping[str, Any]) -> None:
    import psycopg

    batch = int(spec["batch"])
    options = f"-c search_path={spec['schema']}"
    connections = [
        psycopg.connect(spec["url"], autocommit=True, options=options) for _ in range(threads)
    ]
    errors: list[BaseException] = []

    def loop(thread: int, conn: Any) -> None:
        slot = index * threads + thread
        try:
            while not signals.stop.is_set():
                if batch == 1:
                    row = conn.execute(CLAIM).fetchone()
                    if row is None:
                        return
                    conn.execute(ACK, (row[0],))  # the no-op handler ran before this
                    signals.counts[slot] += 1
                else:
                    rows = conn.execute(CLAIM_MANY, (batch,)).fetchall()
                    if not rows:
                        return
                    conn.execute(ACK_MANY, ([row[0] for row in rows],))
                    signals.counts[slot] += len(rows)
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    signals.ready[index] = 1
    signals.go.wait()
    workers = [
        threading.Thread(target=loop, args=(i, c), daemon=True) for i, c in enumerate(connections)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for c in connections:
        c.close()
    if errors:
        raise errors[0]


def procrastinate_worker(
    index: int, threads: int, signals: Signals, spec: Mapping[str, Any]
) -> None:
    from peers.procrastinate_peer import _app, _define

    app = _app(spec["schema"], threads + 2)
    _define(app, lambda t, started: None)

    async def run() -> None:
        async with app.open_async():
            signals.ready[index] = 1
            while not signals.go.is_set():  # a multiprocessing Event: no awaitable form
                await asyncio.sleep(0.01)
            await app.run_worker_async(
                concurrency=threads, wait=False, install_signal_handlers=False
            )

    asyncio.run(run())


class PeerRun:
    """A throwaway schema holding one peer's table, filled with the backlog."""

    store = "postgres"

    def __init__(self, kind: str, url: str, batch: int = 1) -> None:
        from peers.pg import connect

        self.kind = kind
        self.url = url
        self.batch = batch
        self.schema = f"bench_burndown_{kind}_{uuid.uuid4().hex[:8]}"
        self._conn = connect()
        self._conn.execute(f'CREATE SCHEMA "{self.schema}"')
        self.table = f"{self.schema}." + ("jobs" if kind == "raw" else "procrastinate_jobs")
        self.spec: dict[str, Any] = {"url": url, "schema": self.schema, "batch": batch}
        if kind == "raw":
            self.insert_method = "INSERT ... SELECT generate_series (one statement)"
        else:
            self.insert_method = f"procrastinate batch_defer_async, {INSERT_BATCH:,} jobs per call"

    def insert(self, jobs: int) -> float:
        began = time.perf_counter()
        if self.kind == "raw":
            from peers.pg import connect, search_path_options

            with connect(options=search_path_options(self.schema)) as conn:
                conn.execute(CREATE)
                conn.execute(
                    "INSERT INTO jobs (payload) SELECT jsonb_build_object('i', i) "
                    "FROM generate_series(0, %s - 1) AS i",
                    (jobs,),
                )
        else:
            self._procrastinate_insert(jobs)
        self._conn.execute(f"ANALYZE {self.table}")
        return time.perf_counter() - began

    def _procrastinate_insert(self, jobs: int) -> None:
        from peers.procrastinate_peer import _app, _define

        app = _app(self.schema, 2)
        noop = _define(app, lambda t, started: None)

        async def run() -> None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()
                for start in range(0, jobs, INSERT_BATCH):
                    size = min(INSERT_BATCH, jobs - start)
                    await noop.batch_defer_async(*({"t": 0.0} for _ in range(size)))

        asyncio.run(run())

    def worker(self) -> Any:
        return raw_worker if self.kind == "raw" else procrastinate_worker

    def done_query(self) -> Any:
        """For Procrastinate: the committed finishes, counted in the table."""
        if self.kind == "raw":
            return None
        sql = f"SELECT count(*) FROM {self.table} WHERE status = 'succeeded'"
        return lambda signals: int(self._conn.execute(sql).fetchone()[0])

    def sample(self) -> dict[str, Any]:
        stats = pg_table_stats(self._conn, self.table, self.schema)
        return stats

    def final(self) -> dict[str, Any]:
        return self.sample()

    def settings(self) -> dict[str, Any]:
        return pg_settings(self._conn)

    def server_root(self) -> int | None:
        return postmaster_of(self._conn)

    def cleanup(self) -> None:
        try:
            self._conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        finally:
            self._conn.close()
