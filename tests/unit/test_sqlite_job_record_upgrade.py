"""A SQLite file written before the job record (schema 4) upgrades in place: its jobs read
back with an empty history, its status CHECK accepts ``cancelled``, and they can be
cancelled, run and completed with a history."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from durabl import SqliteJobQueue
from durabl.model.options import build_new_job
from durabl.stores.sqlite import codec, schema, writes
from durabl.testing import FakeClock


def test_a_schema_4_file_upgrades_and_its_jobs_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "old.sqlite3")
    clock = FakeClock()
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", [m for m in schema.MIGRATIONS if m[0] <= 4])
        old = SqliteJobQueue(path, clock=clock)
        old.startup()
        assert old.schema_version() == (4, 4)
        old.close()
    # The rows an older release wrote: only the columns schema 4 has.
    conn = sqlite3.connect(path)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(durabl_jobs)")}
    ids = []
    for n in (1, 2):
        row = writes.new_row(build_new_job("t", {"n": n}), codec.to_ms(clock.now()) + n)
        row = {k: v for k, v in row.items() if k in columns}
        conn.execute(
            f"INSERT INTO durabl_jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
        ids.append(row["id"])
    conn.commit()
    conn.close()
    first, second = ids
    new = SqliteJobQueue(path, clock=clock)
    try:
        new.startup()
        version = new.schema_version()
        assert version is not None and not version.pending
        job = new.get_job(first)
        assert job is not None and (job.status, job.attempt_history) == ("pending", ())
        assert new.cancel(second) == "cancelled"
        clock.advance(1)
        (handle,) = new.claim("t", lease_owner="w")
        assert handle.id == first and handle.complete() == "completed"
        done = new.get_job(first)
        assert done is not None and [a.outcome for a in done.attempt_history] == ["completed"]
        assert new.get_stats().cancelled == 1
    finally:
        new.close()
