"""Paused types in a SQL store: one statement each on the dialect's paused-types table.
The claim statements leave a paused type's jobs out themselves (``Statements``: claims);
what a pause means is :mod:`durabl.model.pauses`'."""

from __future__ import annotations

from datetime import datetime

from durabl.stores.sql.statements import C
from durabl.stores.sql.writes import SqlWrites


class SqlPauses(SqlWrites[C]):
    """``pause_type``, ``resume_type``, ``paused_types`` and a schedule's pause."""

    supports_pause = True

    def write_pause(self, type: str) -> None:
        values, statement = {"type": type, "now": self._now_param()}, self.sql.pause_type
        self._run("pause", lambda tx: tx.execute(statement, values), single=True)

    def write_resume(self, type: str) -> bool:
        statement = self.sql.resume_type
        return self._run(
            "resume",
            lambda tx: tx.execute(statement, {"type": type}).rowcount > 0,
            single=True,
        )

    def read_paused(self) -> list[str]:
        statement = self.sql.paused_types
        rows = self._run(
            "paused_types",
            lambda tx: tx.execute(statement, {}).fetchall(),
            write=False,
            single=True,
        )
        return [str(row["type"]) for row in rows]

    def _type_paused(self, tx: C, type: str) -> bool:
        """Inside a transaction: whether ``type`` is paused."""
        return tx.execute(self.sql.type_paused, {"type": type}).fetchone() is not None

    def set_schedule_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> bool:
        values = {
            "name": name,
            "paused": paused,
            "next": None if next_run_at is None else self._instant(next_run_at),
        }
        statement = self.sql.pause_schedule
        return self._run(
            "pause_schedule",
            lambda tx: tx.execute(statement, values).rowcount == 1,
            single=True,
        )
