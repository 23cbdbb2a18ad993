"""``durabl jobs --parent ID`` through a real subprocess on a SQLite file: only the
children of that job, and none for a job without any."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from durabl import Child, Job, JobQueue, Orchestrator, backend_from_url
from durabl.orchestrator import OrchestrationContext
from tests.cli.test_commands import durabl_cli


def test_jobs_parent_lists_the_children_of_a_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.gather("fan-in", octx.start_children("fan-out", [Child("leaf", {"n": 1})] * 3))

    orch = Orchestrator(queue)
    orch.define("fan", body, start=False)
    queue.register("fan", orch.definitions["fan"].handler)
    parent = queue.enqueue("fan", {}) or ""
    other = queue.enqueue("leaf", {"n": 2}) or ""
    try:
        assert queue.run_pending("fan") == 1
        listed = durabl_cli("jobs", "--parent", parent, "--json", url=url)
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert len(rows) == 3 and {row["type"] for row in rows} == {"leaf"}
        assert other not in {row["id"] for row in rows}
        none = durabl_cli("jobs", "--parent", other, "--json", url=url)
        assert none.returncode == 0 and json.loads(none.stdout) == []
    finally:
        queue.backend.close()
