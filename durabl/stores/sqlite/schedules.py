"""Schedules in SQLite: the four primitives of :class:`durabl.stores.base.Backend`, each in
the one write (or read) transaction its caller opened. The firing is a compare-and-set on
the schedule row and the enqueue of its jobs in the same ``BEGIN IMMEDIATE`` transaction:
both commit or neither does."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.stores.sqlite import codec, writes
from durabl.stores.sqlite.schema import SCHEDULES_TABLE

T = SCHEDULES_TABLE

_UPSERT = (
    f"INSERT INTO {T} (name, definition, next_run_at) VALUES (:name, :definition, :next) "
    "ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, "
    f"next_run_at = excluded.next_run_at WHERE {T}.definition <> excluded.definition"
)
_LOAD = f"SELECT name, definition, next_run_at, last_run_at, last_job_id FROM {T} ORDER BY name"
_DELETE = f"DELETE FROM {T} WHERE name = ?"
_ADVANCE = (
    f"UPDATE {T} SET next_run_at = :next, last_run_at = coalesce(:last, last_run_at) "
    "WHERE name = :name AND next_run_at = :expected AND definition = :definition"
)
_LAST_JOB = f"UPDATE {T} SET last_job_id = :job_id WHERE name = :name"


def upsert(conn: sqlite3.Connection, schedule: Schedule, next_run_at: datetime) -> None:
    conn.execute(
        _UPSERT,
        {
            "name": schedule.name,
            "definition": schedule.definition(),
            "next": codec.to_ms(next_run_at),
        },
    )


def load(conn: sqlite3.Connection) -> list[Schedule]:
    return [
        Schedule.from_stored(
            row[0],
            row[1],
            None if row[2] is None else codec.from_ms(row[2]),
            None if row[3] is None else codec.from_ms(row[3]),
            row[4],
        )
        for row in conn.execute(_LOAD)
    ]


def delete(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute(_DELETE, (name,)).rowcount == 1


def fire(
    conn: sqlite3.Connection,
    schedule: Schedule,
    next_run_at: datetime,
    jobs: Sequence[tuple[datetime, NewJob]],
    now: int,
) -> list[str | None] | None:
    """Inside the caller's write transaction: the compare-and-set first, then the jobs."""
    if schedule.next_run_at is None:
        return None
    moved = conn.execute(
        _ADVANCE,
        {
            "next": codec.to_ms(next_run_at),
            "last": codec.to_ms(jobs[-1][0]) if jobs else None,
            "name": schedule.name,
            "expected": codec.to_ms(schedule.next_run_at),
            "definition": schedule.definition(),
        },
    ).rowcount
    if moved != 1:
        return None
    ids = [writes.enqueue(conn, job, writes.new_row(job, now)).job_id for _tick, job in jobs]
    if jobs:
        conn.execute(_LAST_JOB, {"job_id": ids[-1], "name": schedule.name})
    return ids
