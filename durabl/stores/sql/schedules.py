"""Schedules in a SQL store: the schedule operations of :class:`durabl.stores.base.Backend`,
each one transaction of the dialect's named statements (a firing's compare-and-set and its
jobs' enqueue in one). :class:`~durabl.stores.sql.store.SqlStore` takes them from this
mixin; a schedule's pause is :class:`~durabl.stores.sql.pauses.SqlPauses`'."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.stores.base import EnqueueResult
from durabl.stores.sql.statements import C
from durabl.stores.sql.writes import SqlWrites


class SqlSchedules(SqlWrites[C]):
    """``upsert_schedule``, ``load_schedules``, ``delete_schedule``, ``fire_schedule``."""

    supports_schedules = True

    @abstractmethod
    def _from_instant(self, value: Any) -> datetime:
        """An instant column read back, as aware UTC (the dialect's, as for reads)."""

    @abstractmethod
    def _new_row(self, job: NewJob, now: Any) -> dict[str, Any]:
        """See :meth:`durabl.stores.sql.store.SqlStore._new_row`."""

    @abstractmethod
    def _enqueue_in(self, tx: C, job: NewJob, row: dict[str, Any]) -> EnqueueResult:
        """See :meth:`durabl.stores.sql.store.SqlStore._enqueue_in`."""

    # -- schedules ------------------------------------------------------------------------
    def upsert_schedule(self, schedule: Schedule, next_run_at: datetime) -> None:
        values = {
            "name": schedule.name,
            "definition": schedule.definition(),
            "next": self._instant(next_run_at),
        }
        statement = self.sql.upsert_schedule
        self._run("upsert_schedule", lambda tx: tx.execute(statement, values), single=True)

    def load_schedules(self) -> list[Schedule]:
        rows = self._run(
            "load_schedules",
            lambda tx: tx.execute(self.sql.load_schedules, {}).fetchall(),
            write=False,
            single=True,
        )
        return [
            Schedule.from_stored(
                row["name"],
                row["definition"],
                self._maybe_instant(row["next_run_at"]),
                self._maybe_instant(row["last_run_at"]),
                row["last_job_id"],
                bool(row["paused"]),
            )
            for row in rows
        ]

    def _maybe_instant(self, value: Any) -> datetime | None:
        return None if value is None else self._from_instant(value)

    def delete_schedule(self, name: str) -> bool:
        statement = self.sql.delete_schedule
        return self._run(
            "delete_schedule",
            lambda tx: tx.execute(statement, {"name": name}).rowcount == 1,
            single=True,
        )

    def fire_schedule(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None:
        """One transaction: the compare-and-set of the schedule row, then the enqueue of
        each tick's job; both commit or neither does. A repeat after a lost connection is
        safe: if the first attempt committed, the compare-and-set no longer matches."""
        if schedule.next_run_at is None:
            return None
        now = self._now_param()
        rows = [(job, self._new_row(job, now)) for _tick, job in jobs]
        advance = {
            "next": self._instant(next_run_at),
            "last": self._instant(jobs[-1][0]) if jobs else None,
            "name": schedule.name,
            "expected": self._instant(schedule.next_run_at),
            "definition": schedule.definition(),
        }
        sql = self.sql

        def fire(tx: C) -> list[str | None] | None:
            if tx.execute(sql.advance_schedule, advance).rowcount != 1:
                return None
            ids = [self._enqueue_in(tx, job, row).job_id for job, row in rows]
            if ids:
                tx.execute(sql.schedule_last_job, {"job_id": ids[-1], "name": schedule.name})
            return ids

        return self._run("fire_schedule", fire)
