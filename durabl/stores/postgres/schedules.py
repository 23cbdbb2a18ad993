"""Schedules in PostgreSQL: the four primitives of :class:`durabl.stores.base.Backend`, and
every statement they use, on ``<table>_schedules`` (schema version 2, see
:mod:`durabl.stores.postgres.schema`). The firing is one
transaction: the compare-and-set ``UPDATE`` of the schedule row, then the insert of each
tick's job; both commit or neither does. A repeat after a lost connection is safe: if the
first attempt committed, the compare-and-set no longer matches and nothing is written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model.clock import as_utc
from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.stores.postgres import writes
from durabl.stores.postgres.schema import Tables
from durabl.stores.postgres.sql import Queries


@dataclass(frozen=True)
class ScheduleStatements:
    """The statements over one queue's schedules table."""

    upsert: str
    load: str
    delete: str
    advance: str
    last_job: str

    @classmethod
    def for_tables(cls, t: Tables) -> ScheduleStatements:
        s = t.qualified("_schedules")
        return cls(
            upsert=(
                f"INSERT INTO {s} AS s (name, definition, next_run_at) "
                "VALUES (%(name)s, %(definition)s, %(next)s) "
                "ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, "
                "next_run_at = excluded.next_run_at WHERE s.definition <> excluded.definition"
            ),
            load=(
                f"SELECT name, definition, next_run_at, last_run_at, last_job_id FROM {s} "
                "ORDER BY name"
            ),
            delete=f"DELETE FROM {s} WHERE name = %(name)s",
            advance=(
                f"UPDATE {s} SET next_run_at = %(next)s, "
                "last_run_at = coalesce(%(last)s, last_run_at) "
                "WHERE name = %(name)s AND next_run_at = %(expected)s "
                "AND definition = %(definition)s"
            ),
            last_job=f"UPDATE {s} SET last_job_id = %(job_id)s WHERE name = %(name)s",
        )


def upsert(
    cur: Cursor[DictRow], s: ScheduleStatements, schedule: Schedule, next_run_at: datetime
) -> None:
    cur.execute(
        s.upsert,
        {"name": schedule.name, "definition": schedule.definition(), "next": next_run_at},
    )


def load(cur: Cursor[DictRow], s: ScheduleStatements) -> list[Schedule]:
    cur.execute(s.load)
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


def delete(cur: Cursor[DictRow], s: ScheduleStatements, name: str) -> bool:
    cur.execute(s.delete, {"name": name})
    return cur.rowcount == 1


def fire(
    cur: Cursor[DictRow],
    s: ScheduleStatements,
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
        s.advance,
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
        cur.execute(s.last_job, {"job_id": ids[-1], "name": schedule.name})
    return ids
