"""Across processes in effect (two store objects, two pools) and threads: every job claimed
exactly once; and time on the server's clock when no clock is injected."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

from durabl import Job, JobContext, JobQueue
from durabl.stores.base import Completion
from durabl.stores.postgres import PostgresJobQueue
from durabl.testing import wait_until
from tests.contract.support import enqueue_id

JOBS = 1500
THREADS = 6


def test_threads_of_two_stores_claim_every_job_exactly_once(pg: PostgresJobQueue) -> None:
    other = PostgresJobQueue(pg.url, table=pg.table)
    ids = {enqueue_id(pg, data={"n": n}, priority=n % 3) for n in range(JOBS)}
    claims: Counter[str] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(store: PostgresJobQueue, n: int) -> None:
        try:
            while True:
                handles = store.claim("t", limit=1 + n % 8, lease_owner=f"w{n}", starting=2)
                if not handles:
                    if store.count_jobs(status="pending") == 0:
                        return
                    continue
                with lock:
                    claims.update(h.id for h in handles)
                store.mark_started([(h.id, h.claim_token) for h in handles])
                results = store.complete_many([Completion(h.id, h.claim_token) for h in handles])
                assert {r.status for r in results} == {"completed"}
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(store, n))
        for n in range(THREADS)
        for store in (pg, other)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        other.close()
    assert errors == []
    assert set(claims) == ids
    assert set(claims.values()) == {1}, "a job was claimed twice"
    assert pg.get_stats().completed == JOBS


def test_two_queues_run_every_job_exactly_once(pg: PostgresJobQueue) -> None:
    other = PostgresJobQueue(pg.url, table=pg.table)
    queues = [JobQueue(store, visibility_timeout=30) for store in (pg, other)]
    counts: Counter[int] = Counter()
    lock = threading.Lock()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        with lock:
            counts[job.data["n"]] += 1

    for q in queues:
        q.process("t", handler, concurrency=4, poll_interval=0.01)
    try:
        for n in range(300):
            queues[n % 2].enqueue("t", {"n": n})
        assert wait_until(lambda: pg.get_stats("t").completed == 300, timeout=60)
    finally:
        for q in queues:
            q.shutdown(5)
        other.close()
    assert sorted(counts) == list(range(300))
    assert set(counts.values()) == {1}


def test_without_a_clock_now_is_the_servers_time_in_milliseconds(pg: PostgresJobQueue) -> None:
    now = pg.now()
    assert now.tzinfo is not None and now.microsecond % 1000 == 0
    assert abs(now - datetime.now(timezone.utc)) < timedelta(seconds=5)  # same machine here


def test_leases_run_on_the_servers_clock(pg: PostgresJobQueue) -> None:
    job_id = enqueue_id(pg)
    handle = pg.claim("t")[0]
    assert pg.reap(60).handled == 0  # renewed just now, on the server's clock
    assert pg.heartbeat(handle.id, handle.claim_token) == "applied"
    # A lease older than the timeout by the server's clock is reaped.
    wait_until(lambda: False, timeout=0.05)
    report = pg.reap(0.01)
    assert report.recovered == 1 and report.job_ids == (job_id,)
    assert pg.heartbeat(handle.id, handle.claim_token) == "lease-lost"


def test_a_job_due_later_by_the_servers_clock_is_not_claimed_yet(pg: PostgresJobQueue) -> None:
    enqueue_id(pg, run_at=pg.now() + timedelta(seconds=30))
    assert pg.claim("t") == []
    assert pg.get_stats().pending == 1
