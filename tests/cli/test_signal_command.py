"""``durabl signal JOB NAME [--data JSON]`` through a real subprocess on a SQLite file: the
signal is stored with its job (a waiting orchestration receives it), ``--json``, exit 1 for
an unknown or finished job, exit 2 for bad JSON or a bad name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from durabl import Job, JobQueue, Orchestrator, Signal, backend_from_url
from durabl.orchestrator import OrchestrationContext
from tests.cli.test_commands import durabl_cli


def test_signal_sends_to_a_waiting_orchestration(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    received: list[Signal | None] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        received.append(octx.wait_for_signal("approval", "approve"))

    orch = Orchestrator(queue)
    orch.define("approve-order", body, start=False)
    queue.register("approve-order", orch.definitions["approve-order"].handler)
    job_id = queue.enqueue("approve-order", {}) or ""
    try:
        assert queue.run_pending() == 1
        sent = durabl_cli("signal", job_id, "approve", "--data", '{"by": "ana"}', "--json", url=url)
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout) == {"signalled": True}
        job = queue.get_job(job_id)
        assert job is not None and job.waiting_for is None  # woken: due now
        assert queue.run_pending() == 1
        assert [s.data if s else None for s in received] == [{"by": "ana"}]

        again = durabl_cli("signal", job_id, "approve", url=url)  # completed now
        assert again.returncode == 1 and "unknown or finished" in again.stdout
        bad = durabl_cli("signal", job_id, "approve", "--data", "{not json", url=url)
        assert bad.returncode == 2 and "expected JSON" in bad.stderr
        empty = durabl_cli("signal", job_id, "", url=url)
        assert empty.returncode == 2 and "non-empty" in empty.stderr
    finally:
        queue.backend.close()
