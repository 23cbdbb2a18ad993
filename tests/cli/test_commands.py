"""The operator commands of ``durabl`` through real subprocesses on a SQLite file: tables,
``--json`` shapes, exit codes, the URL from ``$DURABL_URL``, and one-line errors."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import durabl
from durabl import JobQueue, NonRetryable, backend_from_url

ROOT = Path(__file__).resolve().parents[2]


def durabl_cli(
    *args: str, url: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DURABL_URL"}
    if url is not None:
        env["DURABL_URL"] = url
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "durabl", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite store holding two failed jobs of type "a" and one pending job of "b"."""
    store_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(store_url))
    for i in range(2):
        queue.enqueue("a", {"i": i})
    queue.enqueue("b", {"n": 1}, dedupe_key="order:42")

    def boom(job: Any, ctx: Any) -> None:
        raise NonRetryable("boom")

    queue.register("a", boom)
    queue.run_pending("a")
    queue.backend.close()
    return store_url


def failed_ids(url: str) -> list[str]:
    result = durabl_cli("jobs", "--status", "failed", "--json", url=url)
    return [job["id"] for job in json.loads(result.stdout)]


def test_console_script_is_declared_for_the_same_main() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = config["options.entry_points"]["console_scripts"].strip().splitlines()
    assert "durabl = durabl.cli:main" in [line.strip() for line in scripts]


def test_stats_table_and_json(url: str) -> None:
    table = durabl_cli("stats", url=url)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["TYPE", "PENDING", "ACTIVE"]
    assert any(line.split()[0] == "(all)" for line in lines)
    as_json = json.loads(durabl_cli("stats", "--json", url=url).stdout)
    assert as_json["failed"] == 2 and as_json["pending"] == 1
    assert as_json["failed_by_kind"] == {"fatal": 2}
    assert as_json["types"]["a"]["failed"] == 2
    one = json.loads(durabl_cli("stats", "--type", "b", "--json", "--url", url).stdout)
    assert one["pending"] == 1 and "types" not in one


def test_jobs_filters_and_json_shape(url: str) -> None:
    jobs = json.loads(durabl_cli("jobs", "--json", url=url).stdout)
    assert len(jobs) == 3
    for key in ("id", "type", "status", "attempts", "max_attempts", "failure_kind", "run_at"):
        assert key in jobs[0]
    failed = json.loads(
        durabl_cli("jobs", "--status", "failed", "--kind", "fatal", "--json", url=url).stdout
    )
    assert {job["type"] for job in failed} == {"a"}
    found = json.loads(durabl_cli("jobs", "--search", "order:", "--json", url=url).stdout)
    assert [job["type"] for job in found] == ["b"]
    limited = json.loads(durabl_cli("jobs", "--limit", "1", "--json", url=url).stdout)
    assert len(limited) == 1
    assert durabl_cli("jobs", "--status", "nope", url=url).returncode == 2


def test_show_prints_one_job_or_fails(url: str) -> None:
    job_id = failed_ids(url)[0]
    shown = durabl_cli("show", job_id, url=url)
    assert shown.returncode == 0
    assert job_id in shown.stdout and "boom" in shown.stdout
    record = json.loads(durabl_cli("show", job_id, "--json", url=url).stdout)
    assert record["id"] == job_id and record["status"] == "failed"
    missing = durabl_cli("show", "no-such-job", url=url)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "durabl show: error: no job no-such-job"


def test_retry_by_id_and_all(url: str) -> None:
    first, _ = failed_ids(url)
    one = durabl_cli("retry", first, "--json", url=url)
    assert one.returncode == 0
    assert json.loads(one.stdout)["retried"] == 1
    again = durabl_cli("retry", first, url=url)  # pending now: nothing to retry
    assert again.returncode == 1 and "not retried" in again.stdout
    rest = durabl_cli("retry", "--all", "--type", "a", "--json", url=url)
    assert json.loads(rest.stdout)["retried"] == 1
    assert failed_ids(url) == []
    assert durabl_cli("retry", url=url).returncode == 2  # neither ids nor --all: usage


def test_delete(url: str) -> None:
    job_id = failed_ids(url)[0]
    deleted = durabl_cli("delete", job_id, "--json", url=url)
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["deleted"] == 1
    assert durabl_cli("delete", job_id, url=url).returncode == 1


def test_health_and_max_lag(url: str) -> None:
    healthy = durabl_cli("health", url=url)
    assert healthy.returncode == 0 and healthy.stdout.startswith("healthy")
    time.sleep(0.01)  # the pending job is due at enqueue: any lag exceeds 0.001 s
    lagging = durabl_cli("health", "--max-lag", "0.001", "--json", url=url)
    assert lagging.returncode == 1
    assert json.loads(lagging.stdout)["healthy"] is False


def test_schedules_lists_stored_schedules(url: str) -> None:
    queue = JobQueue(backend_from_url(url))
    queue.schedule("nightly", "report", cron="0 2 * * *")
    queue.backend.close()
    table = durabl_cli("schedules", url=url)
    assert table.returncode == 0 and "nightly" in table.stdout and "0 2 * * *" in table.stdout
    rows = json.loads(durabl_cli("schedules", "--json", url=url).stdout)
    assert rows[0]["name"] == "nightly" and rows[0]["type"] == "report"


def test_events_lists_the_stored_subscriptions(url: str) -> None:
    queue = JobQueue(backend_from_url(url))
    queue.register("sync-invoice", lambda job, ctx: None, on_event="billing/invoice.sync")
    queue.register("mail-invoice", lambda job, ctx: None, on_event="billing/invoice.sync")
    queue.backend.close()
    table = durabl_cli("events", url=url)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["EVENT", "TYPE"]
    assert [line.split() for line in lines[1:]] == [
        ["billing/invoice.sync", "mail-invoice"],
        ["billing/invoice.sync", "sync-invoice"],
    ]
    rows = json.loads(durabl_cli("events", "--json", url=url).stdout)
    assert rows == [
        {"event": "billing/invoice.sync", "type": "mail-invoice"},
        {"event": "billing/invoice.sync", "type": "sync-invoice"},
    ]


def test_url_comes_from_the_environment_and_its_absence_names_both() -> None:
    result = durabl_cli("stats")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "durabl stats: error: no store URL: pass --url URL or set $DURABL_URL"
    )
    usage = durabl_cli("reap", "--help").stdout
    assert "[--url URL]" in usage and "$DURABL_URL" in usage
    assert "examples:" in usage


def test_missing_sqlite_directory_is_named(tmp_path: Path) -> None:
    result = durabl_cli("migrate", "--url", f"sqlite:///{tmp_path}/nowhere/x.db")
    assert result.returncode == 1
    assert f"{tmp_path}/nowhere does not exist" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_unreachable_store_fails_within_ten_seconds_on_one_line() -> None:
    started = time.monotonic()
    result = durabl_cli("stats", "--url", "mongodb://ops:s3cret@127.0.0.1:1/x", timeout=20)
    assert time.monotonic() - started < 10
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert "mongodb://ops:***@127.0.0.1:1/x" in result.stderr and "s3cret" not in result.stderr


def test_version_and_help_for_every_command() -> None:
    assert durabl_cli("--version").stdout.strip() == f"durabl {durabl.__version__}"
    for command in ("stats", "jobs", "show", "retry", "delete", "schedules", "health", "worker"):
        result = durabl_cli(command, "--help")
        assert result.returncode == 0 and "examples:" in result.stdout, command


def test_mongodb_waits_at_most_eight_seconds_for_a_server_unless_told() -> None:
    bounded = backend_from_url("mongodb://127.0.0.1:1/x")
    chosen = backend_from_url("mongodb://127.0.0.1:1/x?serverSelectionTimeoutMS=30000")
    try:
        assert bounded.col.database.client.options.server_selection_timeout == 8.0  # type: ignore[attr-defined]
        assert chosen.col.database.client.options.server_selection_timeout == 30.0  # type: ignore[attr-defined]
    finally:
        bounded.close()
        chosen.close()


@pytest.mark.skipif(not hasattr(JobQueue, "cancel"), reason="queue.cancel not in this tree yet")
def test_cancel(url: str) -> None:
    pending = json.loads(durabl_cli("jobs", "--status", "pending", "--json", url=url).stdout)
    job_id = pending[0]["id"]
    cancelled = durabl_cli("cancel", job_id, "--reason", "ops", "--json", url=url)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["cancelled"] == 1
    again = durabl_cli("cancel", job_id, url=url)
    assert again.returncode == 1 and f"not cancelled: {job_id}" in again.stdout


@pytest.mark.skipif(not hasattr(JobQueue, "prune"), reason="queue.prune not in this tree yet")
def test_prune(url: str) -> None:
    queue = JobQueue(backend_from_url(url))
    queue.register("b", lambda job, ctx: None)
    queue.run_pending("b")
    queue.backend.close()
    kept = durabl_cli("prune", "--older-than", "7d", "--json", url=url)
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout) == {"pruned": 0}
    time.sleep(0.01)  # the completion is now older than 1 ms
    pruned = durabl_cli("prune", "--older-than", "0.001", url=url)
    assert pruned.stdout.strip() == "pruned 1 job(s)"
    assert durabl_cli("prune", "--older-than", "soon", url=url).returncode == 2


def test_durations_for_prune() -> None:
    from durabl.cli.ops import duration_arg

    assert duration_arg("7d").total_seconds() == 7 * 86400
    assert duration_arg("12h").total_seconds() == 12 * 3600
    assert duration_arg("30m").total_seconds() == 1800
    assert duration_arg("90").total_seconds() == 90
