"""``durabl jobs --waiting`` through a real subprocess on a SQLite file: only the jobs
suspended in a wait, with what each waits for; not a retried orchestration waiting out its
backoff, nor a plain delayed job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from durabl import Job, JobQueue, Orchestrator, backend_from_url
from durabl.orchestrator import OrchestrationContext
from tests.cli.test_commands import durabl_cli


def flaky(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.step("charge", lambda keys, signal: 1)
    raise RuntimeError("the gateway is down")


def test_jobs_waiting_lists_the_suspended_jobs_and_what_they_wait_for(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    orch = Orchestrator(queue)
    bodies: dict[str, Any] = {
        "sleeper": lambda job, octx: octx.sleep("nap", 3600),
        "approve-order": lambda job, octx: octx.wait_for_signal("approval", "approve"),
        "flaky": flaky,
    }
    for type, body in bodies.items():
        orch.define(type, body, start=False)
        queue.register(type, orch.definitions[type].handler)
    sleeping = queue.enqueue("sleeper", {}) or ""
    approving = queue.enqueue("approve-order", {}) or ""
    queue.enqueue("flaky", {}, max_attempts=3, backoff="fixed", backoff_delay=600)
    queue.enqueue("plain", {}, delay=600)
    try:
        assert queue.run_pending() == 3
        listed = durabl_cli("jobs", "--waiting", "--json", url=url)
        assert listed.returncode == 0, listed.stderr
        rows = {row["id"]: row["waiting_for"] for row in json.loads(listed.stdout)}
        assert rows.keys() == {sleeping, approving}
        assert rows[approving] == "signal:approve" and rows[sleeping].startswith("until ")
        table = durabl_cli("jobs", "--waiting", "--type", "approve-order", url=url)
        assert table.returncode == 0, table.stderr
        assert "WAITING_FOR" in table.stdout and "signal:approve" in table.stdout
        assert sleeping not in table.stdout
        everything = durabl_cli("jobs", "--json", url=url)
        assert len(json.loads(everything.stdout)) == 4
    finally:
        queue.backend.close()
