"""``durabl pause TYPE``, ``durabl resume TYPE``, ``durabl paused`` and ``durabl schedules
pause|resume|run NAME`` through a real subprocess on a SQLite file: what they store is
what the queue then does, ``--json``, exit 1 for an unknown schedule, exit 2 for a bad
type or a missing NAME; ``durabl stats`` and ``durabl health`` show paused types."""

from __future__ import annotations

import json
from pathlib import Path

from durabl import JobQueue, backend_from_url
from tests.cli.test_commands import durabl_cli


def test_pause_and_resume_a_type_from_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    queue.register("send", lambda job, ctx: None)
    try:
        queue.enqueue("send", {})
        paused = durabl_cli("pause", "send", "--json", url=url)
        assert paused.returncode == 0, paused.stderr
        assert json.loads(paused.stdout) == {"paused": "send"}
        assert queue.paused_types() == ["send"]
        assert queue.run_pending("send") == 0  # the pause is the store's: this process too

        listed = durabl_cli("paused", url=url)
        assert listed.returncode == 0 and listed.stdout.split() == ["send"]
        stats = durabl_cli("stats", "--json", url=url)
        out = json.loads(stats.stdout)
        assert out["paused_types"] == ["send"] and out["types"]["send"]["paused"] is True
        table = durabl_cli("stats", url=url)
        assert "PAUSED" in table.stdout.splitlines()[0]

        resumed = durabl_cli("resume", "send", url=url)
        assert resumed.returncode == 0 and resumed.stdout.strip() == "resumed send"
        assert queue.paused_types() == []
        assert queue.run_pending("send") == 1

        bad = durabl_cli("pause", "", url=url)
        assert bad.returncode == 2 and "non-empty" in bad.stderr
        assert queue.paused_types() == []
    finally:
        queue.backend.close()


def test_health_leaves_a_paused_types_lag_out(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    try:
        queue.enqueue("held", {}, run_at=queue.backend.now().replace(year=2000))
        late = durabl_cli("health", "--max-lag", "60", url=url)
        assert late.returncode == 1 and "waited" in late.stderr
        queue.pause("held")
        calm = durabl_cli("health", "--max-lag", "60", url=url)
        assert calm.returncode == 0, calm.stderr
        of_type = durabl_cli("health", "--max-lag", "60", "--type", "held", url=url)
        assert of_type.returncode == 0 and "paused" in of_type.stdout
    finally:
        queue.backend.close()


def test_schedule_controls_from_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(url))
    try:
        queue.schedule("nightly", "report", cron="0 3 * * *", data={"full": True})
        before = queue.list_schedules()[0].next_run_at

        paused = durabl_cli("schedules", "pause", "nightly", url=url)
        assert paused.returncode == 0 and paused.stdout.strip() == "paused schedule nightly"
        assert queue.list_schedules()[0].paused is True
        listed = durabl_cli("schedules", "--json", url=url)
        assert json.loads(listed.stdout)[0]["paused"] is True

        ran = durabl_cli("schedules", "run", "nightly", "--json", url=url)
        assert ran.returncode == 0, ran.stderr
        job_id = json.loads(ran.stdout)["job_id"]
        job = queue.get_job(job_id)
        assert job is not None and (job.type, job.data) == ("report", {"full": True})
        assert queue.list_schedules()[0].next_run_at == before  # the ticks did not move

        resumed = durabl_cli("schedules", "resume", "nightly", url=url)
        assert resumed.returncode == 0 and queue.list_schedules()[0].paused is False

        unknown = durabl_cli("schedules", "pause", "nope", url=url)
        assert unknown.returncode == 1 and "no schedule named 'nope'" in unknown.stderr
        missing = durabl_cli("schedules", "run", url=url)
        assert missing.returncode == 2 and "NAME" in missing.stderr
    finally:
        queue.backend.close()
