"""The ceiling: a bare ``FOR UPDATE SKIP LOCKED`` claim + ack loop in psycopg.

No library, no lease, no token, no retry, no events: ``workers`` threads, each with its own
autocommit connection, loop on two statements per job, the shape every PostgreSQL queue
builds on:

* claim: ``UPDATE jobs SET status = 'running' WHERE id = (SELECT id FROM jobs WHERE
  status = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, payload``
  (a partial index on ``id WHERE status = 'pending'`` serves the sub-select);
* run the no-op handler;
* ack: ``UPDATE jobs SET status = 'done' WHERE id = %s``.

A thread stops when its claim finds nothing (the backlog is drained). psycopg prepares
both statements after their fifth use (its default ``prepare_threshold``). Throughput
only: it has no way to wait for new jobs, so there is no pickup latency to measure.

``RawSkipLocked(batch=32)`` is the same loop claiming up to 32 rows per statement
(``WHERE id IN (SELECT ... LIMIT 32 FOR UPDATE SKIP LOCKED)``) and acking them together
(``WHERE id = ANY(%s)``): the ceiling for a queue that batches, as durabl does.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from peers.common import Library, Measured, Recorder, Skip, throughput_of
from peers.pg import connect, psycopg, search_path_options, throwaway_schema

CREATE = """
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    status text NOT NULL DEFAULT 'pending',
    payload jsonb NOT NULL
);
CREATE INDEX jobs_pending ON jobs (id) WHERE status = 'pending';
"""
CLAIM = (
    "UPDATE jobs SET status = 'running' WHERE id = (SELECT id FROM jobs "
    "WHERE status = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) "
    "RETURNING id, payload"
)
ACK = "UPDATE jobs SET status = 'done' WHERE id = %s"
CLAIM_MANY = (
    "UPDATE jobs SET status = 'running' WHERE id IN (SELECT id FROM jobs "
    "WHERE status = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT %s) "
    "RETURNING id, payload"
)
ACK_MANY = "UPDATE jobs SET status = 'done' WHERE id = ANY(%s)"


class RawSkipLocked(Library):
    unit = "thread"

    def __init__(self, batch: int = 1) -> None:
        self.batch = batch
        self.name = "raw SKIP LOCKED" + ("" if batch == 1 else f" x{batch}")
        self.polling = (
            f"none: each thread claims {'one job' if batch == 1 else f'up to {batch} jobs'} "
            "per statement until a claim finds nothing (throughput only)"
        )

    def version(self) -> str:
        module = psycopg()
        connect().close()
        return f"psycopg {module.__version__}"

    def throughput(self, workdir: Path, jobs: int, workers: int, timeout: float) -> Measured:
        with throwaway_schema("raw") as schema:
            options = search_path_options(schema)
            with connect(options=options) as conn:
                conn.execute(CREATE)
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO jobs (payload) VALUES (%s)",
                        [(psycopg().types.json.Jsonb({"i": i}),) for i in range(jobs)],
                    )
                conn.execute("ANALYZE jobs")
            recorder = Recorder(jobs)
            errors: list[BaseException] = []
            connections = [connect(options=options) for _ in range(workers)]

            def loop(conn: Any) -> None:
                try:
                    while True:
                        row = conn.execute(CLAIM).fetchone()
                        if row is None:
                            return
                        recorder.record(0.0, time.time())  # the no-op handler
                        conn.execute(ACK, (row[0],))
                except BaseException as exc:  # reported after the join
                    errors.append(exc)

            def loop_many(conn: Any) -> None:
                try:
                    while True:
                        rows = conn.execute(CLAIM_MANY, (self.batch,)).fetchall()
                        if not rows:
                            return
                        for _ in rows:
                            recorder.record(0.0, time.time())  # the no-op handler
                        conn.execute(ACK_MANY, ([row[0] for row in rows],))
                except BaseException as exc:  # reported after the join
                    errors.append(exc)

            target = loop if self.batch == 1 else loop_many
            threads = [threading.Thread(target=target, args=(c,), daemon=True) for c in connections]
            began = time.time()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout)
            for conn in connections:
                conn.close()
            if errors:
                raise errors[0]
            jobs_per_s, wall = throughput_of(recorder.wait(0), jobs, began)
        return Measured(jobs_per_s, wall, None, None, "", "")

    def latency(
        self, workdir: Path, count: int, rate: float, workers: int, producer: str, timeout: float
    ) -> Measured:
        raise Skip("the ceiling is measured for throughput only")
