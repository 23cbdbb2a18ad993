"""``durabl workers`` through a real subprocess on a SQLite file: the live worker of this
test process as a table and as JSON, and nothing once it shut down."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from durabl import JobQueue, backend_from_url
from tests.cli.test_commands import durabl_cli


def noop(job: Any, ctx: Any) -> None:
    return None


def test_workers_lists_a_live_worker_and_forgets_it_after_shutdown(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    try:
        queue.process("mail", noop, concurrency=3)
        table = durabl_cli("workers", url=url)
        assert table.returncode == 0, table.stderr
        assert "STATE" in table.stdout and "mail (3)" in table.stdout
        assert "alive" in table.stdout
        (row,) = json.loads(durabl_cli("workers", "--json", url=url).stdout)
        assert row["id"] == queue.presence.id and row["pid"] == os.getpid()
        assert row["types"] == ["mail"] and row["concurrency"] == {"mail": 3}
        assert (row["state"], row["gone"], row["active"]) == ("alive", False, 0)
        assert {"host", "started_at", "last_seen", "heartbeat_interval"} <= set(row)
    finally:
        queue.shutdown(timeout=1)
        queue.backend.close()
    assert durabl_cli("workers", url=url).stdout.strip() == "(none)"
    assert json.loads(durabl_cli("workers", "--json", url=url).stdout) == []
    assert "examples:" in durabl_cli("workers", "--help").stdout
