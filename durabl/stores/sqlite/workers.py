"""The live workers registry in SQLite: the four primitives of
:class:`durabl.stores.base.Backend` on ``durabl_workers`` (schema version 7, see
:mod:`durabl.stores.sqlite.schema`), each one statement in its caller's transaction."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime

from durabl.model.workers import WorkerInfo
from durabl.stores.sqlite import codec
from durabl.stores.sqlite.schema import WORKERS_TABLE

T = WORKERS_TABLE

_UPSERT = (
    f"INSERT INTO {T} (id, host, pid, concurrency, started_at, last_seen, active, "
    "heartbeat_interval) VALUES (:id, :host, :pid, :concurrency, :started_at, :last_seen, "
    ":active, :heartbeat_interval) ON CONFLICT (id) DO UPDATE SET host = excluded.host, "
    "pid = excluded.pid, concurrency = excluded.concurrency, started_at = excluded.started_at, "
    "last_seen = excluded.last_seen, active = excluded.active, "
    "heartbeat_interval = excluded.heartbeat_interval"
)
_LOAD = (
    "SELECT id, host, pid, concurrency, started_at, last_seen, active, heartbeat_interval "
    f"FROM {T} ORDER BY id"
)
_DELETE = f"DELETE FROM {T} WHERE id = ?"
_PRUNE = f"DELETE FROM {T} WHERE last_seen < ?"


def upsert(conn: sqlite3.Connection, info: WorkerInfo) -> None:
    conn.execute(
        _UPSERT,
        {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "concurrency": json.dumps(info.concurrency, sort_keys=True),
            "started_at": codec.to_ms(info.started_at),
            "last_seen": codec.to_ms(info.last_seen),
            "active": info.active,
            "heartbeat_interval": info.heartbeat_interval,
        },
    )


def load(conn: sqlite3.Connection) -> list[WorkerInfo]:
    return [
        WorkerInfo(
            id=row[0],
            host=row[1],
            pid=int(row[2]),
            concurrency={str(k): int(v) for k, v in json.loads(row[3]).items()},
            started_at=codec.from_ms(row[4]),
            last_seen=codec.from_ms(row[5]),
            active=int(row[6]),
            heartbeat_interval=float(row[7]),
        )
        for row in conn.execute(_LOAD)
    ]


def delete(conn: sqlite3.Connection, worker_id: str) -> bool:
    return conn.execute(_DELETE, (worker_id,)).rowcount == 1


def prune(conn: sqlite3.Connection, last_seen_before: datetime) -> int:
    return conn.execute(_PRUNE, (codec.to_ms(last_seen_before),)).rowcount
