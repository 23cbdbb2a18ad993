"""The "Send signal" form of a waiting orchestration's page: shown only on a job that waits
for a signal and to users who may retry, a CSRF-protected POST that sends it (the job is
woken and receives the data), and bad data refused with nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import Job, JobQueue, Orchestrator, Signal
from durabl.orchestrator import OrchestrationContext
from tests.django.test_admin_helpers import csrf_token, make_user, messages_of

pytestmark = [pytest.mark.django_db, pytest.mark.on_real_mongo]

DETAIL = "admin:durabl_django_pendingjob_detail"
SIGNAL = "admin:durabl_django_pendingjob_signal_one"


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


def waiting_job(queue: JobQueue, received: list[Signal | None]) -> str:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        received.append(octx.wait_for_signal("approval", "approve"))

    orch = Orchestrator(queue)
    orch.define("approve-refund", body, start=False)
    queue.register("approve-refund", orch.definitions["approve-refund"].handler)
    job_id = queue.enqueue("approve-refund", {}) or ""
    assert queue.run_pending("approve-refund") == 1
    return job_id


def test_staff_send_the_signal_a_job_waits_for_from_its_page(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    received: list[Signal | None] = []
    job_id = waiting_job(queue, received)
    page = csrf_client.get(reverse(DETAIL, args=[job_id]))
    text = page.content.decode()
    assert "Waiting for the signal “approve”" in text
    assert f'action="{reverse(SIGNAL, args=[job_id])}"' in text
    form = {"name": "approve", "data": '{"by": "ana"}', "csrfmiddlewaretoken": csrf_token(page)}
    response = csrf_client.post(reverse(SIGNAL, args=[job_id]), form, follow=True)
    assert messages_of(response) == [f"Signal “approve” sent to job {job_id}."]
    job = queue.get_job(job_id)
    assert job is not None and job.waiting_for is None  # woken: due now
    assert "Waiting for the signal" not in response.content.decode()
    assert queue.run_pending("approve-refund") == 1
    assert [s.data if s else None for s in received] == [{"by": "ana"}]
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.object_id == job_id and "approve" in entry.change_message


def test_data_that_is_not_json_is_refused_and_nothing_is_sent(
    csrf_client: Client, queue: JobQueue
) -> None:
    job_id = waiting_job(queue, [])
    page = csrf_client.get(reverse(DETAIL, args=[job_id]))
    form = {"name": "approve", "data": "{not json", "csrfmiddlewaretoken": csrf_token(page)}
    response = csrf_client.post(reverse(SIGNAL, args=[job_id]), form, follow=True)
    [message] = messages_of(response)
    assert message.startswith("Signal not sent: data is not JSON")
    job = queue.get_job(job_id)
    assert job is not None and job.waiting_for == "signal:approve"
    assert queue.backend.next_signal(job_id, "approve", -1) is None


def test_the_form_needs_the_retry_permission_and_a_job_that_waits(
    queue: JobQueue, csrf_client: Client
) -> None:
    job_id = waiting_job(queue, [])
    viewer = Client()
    viewer.force_login(make_user("viewer", "view_job"))
    page = viewer.get(reverse(DETAIL, args=[job_id])).content.decode()
    assert "Waiting for the signal" not in page
    assert viewer.post(reverse(SIGNAL, args=[job_id]), {"name": "approve"}).status_code == 403
    plain = queue.enqueue("email", {}) or ""
    assert (
        "Waiting for the signal"
        not in csrf_client.get(reverse(DETAIL, args=[plain])).content.decode()
    )
