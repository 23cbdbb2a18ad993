"""Waiting jobs in the admin: the pending list's "waiting" filter shows the jobs suspended
in a sleep, a signal wait or a gather, with what each waits for and since when; a job's
page says "Waiting since" next to "Waiting for"; acting on every waiting job acts on
those only."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import Child, Job, JobQueue, Orchestrator
from durabl.orchestrator import OrchestrationContext
from durabl_django.views.common import format_time
from tests.django.test_admin_helpers import csrf_token, messages_of, rows

pytestmark = [pytest.mark.django_db]

PENDING = "admin:durabl_django_pendingjob_changelist"
CANCEL = "admin:durabl_django_pendingjob_cancel"


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


@pytest.fixture
def client(csrf_client: Client) -> Client:
    """The conftest's logged-in superuser (CSRF checked, as a browser's POSTs are)."""
    return csrf_client


def flaky(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.step("charge", lambda keys, signal: 1)
    raise RuntimeError("the gateway is down")


BODIES = {
    "sleeper": lambda job, octx: octx.sleep("nap", 3600),
    "approver": lambda job, octx: octx.wait_for_signal("approval", "approve"),
    "fan": lambda job, octx: octx.gather("fan-in", octx.start_children("out", [Child("leaf", {})])),
    "flaky": flaky,
}


@pytest.fixture
def jobs(queue: JobQueue) -> dict[str, str]:
    """Three waiting jobs and three pending ones that are not (a retried orchestration in
    its backoff, a delayed job, a due one; and the gather's child): ids by name."""
    orch = Orchestrator(queue)
    for type, body in BODIES.items():
        orch.define(type, body, start=False)
        queue.register(type, orch.definitions[type].handler)
    backoff = {"max_attempts": 3, "backoff": "fixed", "backoff_delay": 600}
    ids = {
        "sleeping": queue.enqueue("sleeper", {}) or "",
        "signal": queue.enqueue("approver", {}) or "",
        "gather": queue.enqueue("fan", {}) or "",
        "backoff": queue.enqueue("flaky", {}, **backoff) or "",
    }
    for type in BODIES:
        assert queue.run_pending(type) == 1
    ids["delayed"] = queue.enqueue("plain", {}, delay=600) or ""
    ids["due"] = queue.enqueue("plain", {}) or ""
    return ids


WAITING = ("sleeping", "signal", "gather")


def test_the_waiting_filter_lists_suspended_jobs_with_what_they_wait_for(
    client: Client, queue: JobQueue, jobs: dict[str, str]
) -> None:
    page = client.get(reverse(PENDING), {"waiting": "1"})
    listed = rows(page)
    assert sorted(listed) == sorted(jobs[name] for name in WAITING)
    html = page.content.decode()
    assert "Waiting for" in html and "Waiting since" in html
    assert "signal:approve" in html and "children:fan-in" in html and "until " in html
    # Every pending job without the filter, whose choice links to it.
    page = client.get(reverse(PENDING))
    assert set(rows(page)) >= set(jobs.values())
    assert "?waiting=1" in page.content.decode()


def test_the_waiting_filter_keeps_the_other_filters(
    client: Client, queue: JobQueue, jobs: dict[str, str]
) -> None:
    page = client.get(reverse(PENDING), {"waiting": "1", "type": "approver"})
    assert rows(page) == [jobs["signal"]]
    assert '<a href="?type=approver">All</a>' in page.content.decode()  # drops "waiting"


def test_a_waiting_job_page_says_since_when_it_waits(
    client: Client, queue: JobQueue, jobs: dict[str, str]
) -> None:
    job = queue.get_job(jobs["signal"])
    assert job is not None and job.journal
    since = format_time(job.journal[-1]["at"], zone=True)
    page = client.get(reverse("admin:durabl_django_pendingjob_detail", args=[job.id]))
    html = page.content.decode()
    assert "Waiting for" in html and "signal:approve" in html
    assert "Waiting since" in html and since in html
    page = client.get(reverse("admin:durabl_django_pendingjob_detail", args=[jobs["backoff"]]))
    assert "Waiting since" not in page.content.decode()


def test_cancelling_every_waiting_job_cancels_those_only(
    client: Client, queue: JobQueue, jobs: dict[str, str]
) -> None:
    query = {"waiting": "1", "select_across": "1"}
    page = client.get(reverse(CANCEL), query)
    assert page.status_code == 200
    form = {**query, "post": "yes", "csrfmiddlewaretoken": csrf_token(page)}
    response = client.post(reverse(CANCEL), form, follow=True)
    assert messages_of(response) == ["3 cancelled."]
    cancelled = {
        name for name, i in jobs.items() if getattr(queue.get_job(i), "status", "") == "cancelled"
    }
    assert cancelled == set(WAITING)
