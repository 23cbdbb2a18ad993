"""The live workers registry in PostgreSQL: the four primitives of
:class:`durabl.stores.base.Backend`, and every statement they use, on ``<table>_workers``
(schema version 5, see :mod:`durabl.stores.postgres.schema`): one statement each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model.clock import as_utc
from durabl.model.workers import WorkerInfo
from durabl.stores.postgres.schema import Tables


@dataclass(frozen=True)
class WorkerStatements:
    """The statements over one queue's workers table."""

    upsert: str
    load: str
    delete: str
    prune: str

    @classmethod
    def for_tables(cls, t: Tables) -> WorkerStatements:
        w = t.qualified("_workers")
        return cls(
            upsert=(
                f"INSERT INTO {w} (id, host, pid, concurrency, started_at, last_seen, active, "
                "heartbeat_interval) VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s::jsonb, "
                "%(started_at)s, %(last_seen)s, %(active)s, %(heartbeat_interval)s) "
                "ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                "concurrency = excluded.concurrency, started_at = excluded.started_at, "
                "last_seen = excluded.last_seen, active = excluded.active, "
                "heartbeat_interval = excluded.heartbeat_interval"
            ),
            load=(
                "SELECT id, host, pid, concurrency, started_at, last_seen, active, "
                f"heartbeat_interval FROM {w} ORDER BY id"
            ),
            delete=f"DELETE FROM {w} WHERE id = %(id)s",
            prune=f"DELETE FROM {w} WHERE last_seen < %(before)s",
        )


def upsert(cur: Cursor[DictRow], s: WorkerStatements, info: WorkerInfo) -> None:
    cur.execute(
        s.upsert,
        {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "concurrency": json.dumps(info.concurrency, sort_keys=True),
            "started_at": info.started_at,
            "last_seen": info.last_seen,
            "active": info.active,
            "heartbeat_interval": info.heartbeat_interval,
        },
    )


def load(cur: Cursor[DictRow], s: WorkerStatements) -> list[WorkerInfo]:
    cur.execute(s.load)
    return [
        WorkerInfo(
            id=row["id"],
            host=row["host"],
            pid=int(row["pid"]),
            concurrency={str(k): int(v) for k, v in row["concurrency"].items()},
            started_at=as_utc(row["started_at"]),
            last_seen=as_utc(row["last_seen"]),
            active=int(row["active"]),
            heartbeat_interval=float(row["heartbeat_interval"]),
        )
        for row in cur.fetchall()
    ]


def delete(cur: Cursor[DictRow], s: WorkerStatements, worker_id: str) -> bool:
    cur.execute(s.delete, {"id": worker_id})
    return cur.rowcount == 1


def prune(cur: Cursor[DictRow], s: WorkerStatements, last_seen_before: datetime) -> int:
    cur.execute(s.prune, {"before": last_seen_before})
    return cur.rowcount
