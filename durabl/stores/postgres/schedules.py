"""Schedules in PostgreSQL: the four primitives of :class:`durabl.stores.base.Backend` on
``<table>_schedules`` (schema version 2, see :mod:`durabl.stores.postgres.schema`; the
statements are in :mod:`durabl.stores.postgres.sql`). The firing is one transaction: the
compare-and-set ``UPDATE`` of the schedule row, then the insert of each tick's job; both
commit or neither does. A repeat after a lost connection is safe: if the first attempt
committed, the compare-and-set no longer matches and nothing is written."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model.clock import as_utc
from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.stores.postgres import writes
from durabl.stores.postgres.sql import Queries


def upsert(cur: Cursor[DictRow], q: Queries, schedule: Schedule, next_run_at: datetime) -> None:
    cur.execute(
        q.upsert_schedule,
        {"name": schedule.name, "definition": schedule.definition(), "next": next_run_at},
    )


def load(cur: Cursor[DictRow], q: Queries) -> list[Schedule]:
    cur.execute(q.load_schedules)
    return [
        Schedule.from_stored(
            row["name"],
            row["definition"],
            None if row["next_run_at"] is None else as_utc(row["next_run_at"]),
            None if row["last_run_at"] is None else as_utc(row["last_run_at"]),
            row["last_job_id"],
        )
        for row in cur.fetchall()
    ]


def delete(cur: Cursor[DictRow], q: Queries, name: str) -> bool:
    cur.execute(q.delete_schedule, {"name": name})
    return cur.rowcount == 1


def fire(
    cur: Cursor[DictRow],
    q: Queries,
    lock_class: int,
    schedule: Schedule,
    next_run_at: datetime,
    jobs: Sequence[tuple[datetime, NewJob, dict[str, object]]],
) -> list[str | None] | None:
    """Inside one transaction: the compare-and-set first, then each job's insert (``jobs``
    carries each job's insert parameters, made by :func:`writes.new_row`)."""
    if schedule.next_run_at is None:
        return None
    cur.execute(
        q.advance_schedule,
        {
            "next": next_run_at,
            "last": jobs[-1][0] if jobs else None,
            "name": schedule.name,
            "expected": schedule.next_run_at,
            "definition": schedule.definition(),
        },
    )
    if cur.rowcount != 1:
        return None
    ids = [writes.enqueue(cur, q, job, dict(row), lock_class).job_id for _tick, job, row in jobs]
    if jobs:
        cur.execute(q.schedule_last_job, {"job_id": ids[-1], "name": schedule.name})
    return ids
