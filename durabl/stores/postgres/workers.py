"""The live workers registry in PostgreSQL: the four primitives of
:class:`durabl.stores.base.Backend` on ``<table>_workers`` (schema version 5, see
:mod:`durabl.stores.postgres.schema`): one statement each, from
:mod:`durabl.stores.postgres.sql`."""

from __future__ import annotations

import json
from datetime import datetime

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model.clock import as_utc
from durabl.model.workers import WorkerInfo
from durabl.stores.postgres.sql import Queries


def upsert(cur: Cursor[DictRow], q: Queries, info: WorkerInfo) -> None:
    cur.execute(
        q.upsert_worker,
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


def load(cur: Cursor[DictRow], q: Queries) -> list[WorkerInfo]:
    cur.execute(q.load_workers)
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


def delete(cur: Cursor[DictRow], q: Queries, worker_id: str) -> bool:
    cur.execute(q.delete_worker, {"id": worker_id})
    return cur.rowcount == 1


def prune(cur: Cursor[DictRow], q: Queries, last_seen_before: datetime) -> int:
    cur.execute(q.prune_workers, {"before": last_seen_before})
    return cur.rowcount
