"""A job's page: attempt history, orchestration steps, duration, and for an active job its
worker, last heartbeat and lease expiry. Every value escaped."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.test import Client

import durabl_django
from durabl import JobQueue
from durabl.orchestrator.journal import sleep_entry, step_entry
from tests.django.test_admin_helpers import XSS, fail_jobs, page_of

pytestmark = [pytest.mark.django_db, pytest.mark.on_real_mongo]


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


def field(page: str, label: str) -> str:
    match = re.search(rf"<label>{label}:</label><div class=\"readonly\">([^<]*)</div>", page)
    assert match is not None, f"no field {label!r}"
    return html.unescape(match.group(1))


def attempt_rows(page: str) -> list[str]:
    return re.findall(r'<tr class="durabl-attempt durabl-outcome-([\w-]+)">', page)


def test_attempt_history_survives_an_admin_retry(admin_client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1, reason="first")
    assert queue.retry(job_id)
    assert queue.run_pending("email") == 1  # fails again
    page = page_of(admin_client, job_id)
    assert field(page, "Attempts") == "1 of 1"
    assert field(page, "Runs recorded") == "2"
    assert attempt_rows(page) == ["failed", "failed"]
    assert "Created to finished" in page and "Last run took" in page


def test_a_job_without_runs_says_so(admin_client: Client, queue: JobQueue) -> None:
    job_id = queue.enqueue("email", {})
    assert job_id is not None
    page = page_of(admin_client, job_id)
    assert "No finished attempt recorded yet." in page
    assert "Orchestration steps" not in page


def test_active_job_shows_worker_heartbeat_and_lease(admin_client: Client, queue: JobQueue) -> None:
    handle = queue.claim_or_enqueue("report", {"n": 1})
    assert handle is not None
    page = page_of(admin_client, handle.id)
    assert field(page, "Worker")  # the claiming process's lease owner
    assert field(page, "Last heartbeat").endswith(" UTC")
    lease = field(page, "Lease expires")
    assert lease.endswith(" UTC") and "expired" not in lease


def test_orchestration_steps_with_attempt_duration_and_replayed(
    admin_client: Client, queue: JobQueue
) -> None:
    handle = queue.claim_or_enqueue("flow", {})
    assert handle is not None
    at = datetime.now(timezone.utc)
    entries = [
        step_entry(0, "charge card", {"ok": True}, key="k0", at=at, attempt=1),
        step_entry(1, XSS, None, key="k1", at=at + timedelta(seconds=4), attempt=1),
        sleep_entry(2, "wait", at + timedelta(hours=1), at=at + timedelta(seconds=5), attempt=2),
    ]
    assert handle.append_journal(entries, position=0) == "applied"
    page = page_of(admin_client, handle.id)
    assert "Orchestration steps" in page
    steps = re.findall(r'<tr class="durabl-step">(.*?)</tr>', page, re.S)
    assert len(steps) == 3
    assert "charge card" in steps[0] and html.escape(XSS) in steps[1]
    assert XSS not in page
    assert ">4 s</td>" in steps[1]  # since the step before it in the same attempt
    assert "replayed in attempt" not in steps[2]
    assert "(sleep)" in steps[2]


def test_replayed_marks_steps_of_an_earlier_attempt(admin_client: Client, queue: JobQueue) -> None:
    handle = queue.claim_or_enqueue("flow2", {}, max_attempts=3)
    assert handle is not None
    at = datetime.now(timezone.utc)
    entry = step_entry(0, "send", None, key="k0", at=at, attempt=handle.attempts)
    assert handle.append_journal([entry], position=0) == "applied"
    assert handle.fail("transient", retry_at=at) == "retry-scheduled"
    [again] = queue.backend.claim("flow2", limit=1, lease_owner="w2")
    page = page_of(admin_client, again.id)
    [step] = re.findall(r'<tr class="durabl-step">(.*?)</tr>', page, re.S)
    assert f"replayed in attempt {again.attempts}" in step


def test_a_completed_job_shows_its_return_value(admin_client: Client, queue: JobQueue) -> None:
    from durabl import Job, JobContext

    def handler(job: Job[Any], ctx: JobContext) -> dict[str, Any]:
        return {"sent": 3, "note": XSS}

    queue.register("returns", handler)
    job_id = queue.enqueue("returns", {})
    assert job_id is not None and queue.run_pending("returns") == 1
    page = page_of(admin_client, job_id)
    assert "Return value" in page
    assert "&quot;sent&quot;: 3" in page and html.escape(XSS) in page and XSS not in page


def test_a_job_that_ran_again_calls_its_kept_reason_an_earlier_failure(
    admin_client: Client, queue: JobQueue
) -> None:
    from durabl import Job, JobContext

    runs: list[int] = []

    def flaky(job: Job[Any], ctx: JobContext) -> None:
        runs.append(job.attempts)
        if len(runs) == 1:
            raise RuntimeError("first run fails")

    queue.register("flaky", flaky)
    job_id = queue.enqueue("flaky", {}, max_attempts=1)
    assert job_id is not None and queue.run_pending("flaky") == 1
    failed = page_of(admin_client, job_id)
    assert "Failure reason</h2>" in failed and "earlier attempt" not in failed
    assert queue.retry(job_id) and queue.run_pending("flaky") == 1
    completed = page_of(admin_client, job_id)
    assert field(completed, "Status") == "completed"
    assert "An earlier attempt&#x27;s failure</h2>" in completed
    assert "Failure reason</h2>" not in completed


def test_the_page_starts_with_what_matters_and_folds_the_rest(
    admin_client: Client, queue: JobQueue
) -> None:
    """Status, type and attempts, then the failure, the attempts, the logs and the
    payload; the other fields folded under "More about this job", and the empty ones
    named there in one line rather than shown as rows of "-"."""
    [job_id] = fail_jobs(queue, 1, reason="Traceback:\n  line 1\nValueError: nope", log="sent")
    page = page_of(admin_client, job_id)
    markers = [
        "<label>Status:",
        "<label>Type:",
        "<label>Attempts:",
        "<label>Failure kind:",
        'class="durabl-pre durabl-reason"',
        'id="durabl-timeline-heading"',
        'id="durabl-logs-heading"',
        'class="durabl-pre durabl-payload"',
        "More about this job",
    ]
    at = [page.index(marker) for marker in markers]
    assert at == sorted(at)
    first, folded = page.split("More about this job")
    folded = folded.split("</details>")[0]
    for label in ("ID", "Priority", "Created at", "Backoff"):
        assert f"<label>{label}:</label>" in folded and f"<label>{label}:</label>" not in first
    assert "Not set: dedupe key, dedupe scope." in folded
    assert "<label>Dedupe key:</label>" not in page
    assert field(page, "Failed at").endswith(" UTC")
    # The heading shows the id (short, by the styles), whole in its tooltip and its
    # copy button.
    assert (
        f'<h1>Job <span class="durabl-id"><span title="{job_id}">{job_id}</span>'
        f'<button type="button" class="durabl-copy" data-copy="{job_id}"'
    ) in page
