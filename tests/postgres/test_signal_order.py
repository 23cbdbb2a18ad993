"""Signals to one job commit in the order of their numbers on PostgreSQL: a sender holds the
job's row while it numbers its signal, so a wait that read signal n never finds a lower
number committed after it (which it would skip for good)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import psycopg
from psycopg.rows import dict_row

from durabl import JobQueue, PostgresJobQueue
from durabl.model.tagged_json import encode_payload


def test_a_second_sender_waits_for_the_first_to_commit(pg: PostgresJobQueue) -> None:
    queue = JobQueue(pg)
    job_id = queue.enqueue("approve", {}) or ""
    values = {
        "job_id": job_id,
        "name": "item",
        "data": encode_payload("first"),
        "sent_at": datetime.now(timezone.utc),
    }
    with psycopg.connect(pg.url, row_factory=dict_row) as first:
        first_seq = first.execute(pg.sql.store_signal, values).fetchone()["seq"]  # uncommitted
        sent = threading.Event()

        def second() -> None:
            queue.signal(job_id, "item", "second")
            sent.set()

        thread = threading.Thread(target=second)
        thread.start()
        assert not sent.wait(0.5), "the second sender numbered its signal past an open one"
        first.commit()
    thread.join(10)
    assert sent.is_set()
    taken = pg.next_signal(job_id, "item", -1)
    assert taken is not None and (taken.seq, taken.signal.data) == (first_seq, "first")
    following = pg.next_signal(job_id, "item", taken.seq)
    assert following is not None and following.signal.data == "second"
    assert following.seq > first_seq
