"""Signals in a SQL store: ``store_signal`` and ``next_signal`` of
:class:`durabl.stores.base.Backend`, each one statement on the dialect's signals table
(a row per signal, numbered by the table's own sequence, deleted with its job).
:class:`~durabl.stores.sql.store.SqlStore` takes them from this mixin; what a send decides
is :class:`~durabl.stores.engine.StoreBase`'s."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any

from durabl.model.signals import Signal, StoredSignal
from durabl.model.tagged_json import decode_payload, encode_payload
from durabl.stores.sql.statements import C
from durabl.stores.sql.writes import SqlWrites


class SqlSignals(SqlWrites[C]):
    """``store_signal`` and ``next_signal``."""

    supports_signals = True

    @abstractmethod
    def _from_instant(self, value: Any) -> datetime:
        """An instant column read back, as aware UTC (the dialect's, as for reads)."""

    def store_signal(self, job_id: str, name: str, data: Any, sent_at: datetime) -> int | None:
        statement = self.sql.store_signal
        values = {
            "job_id": job_id,
            "name": name,
            "data": encode_payload(data),
            "sent_at": self._instant(sent_at),
        }
        row = self._run(
            "store_signal",
            lambda tx: tx.execute(statement, values).fetchone(),
            single=True,
            repeatable=False,  # a repeat after a lost commit would store it twice
        )
        return None if row is None else int(row["seq"])

    def next_signal(self, job_id: str, name: str, after_seq: int) -> StoredSignal | None:
        statement = self.sql.next_signal
        values = {"job_id": job_id, "name": name, "after": after_seq}
        row = self._run(
            "next_signal",
            lambda tx: tx.execute(statement, values).fetchone(),
            write=False,
            single=True,
        )
        if row is None:
            return None
        sent = Signal(
            str(row["name"]), decode_payload(row["data"]), self._from_instant(row["sent_at"])
        )
        return StoredSignal(int(row["seq"]), sent)
