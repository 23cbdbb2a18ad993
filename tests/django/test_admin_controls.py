"""The admin's controls: Pause / Resume per job type on the queue overview (a paused
type's lag is no alarm there) and Pause / Resume / Run now per schedule on the Schedules
page; CSRF-protected POSTs, each logged in the admin log, refused without the
permission."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import JobQueue
from tests.django.test_admin_helpers import csrf_token, make_user, messages_of

pytestmark = [pytest.mark.django_db, pytest.mark.on_real_mongo]

OVERVIEW = "admin:durabl_django_queueoverview_changelist"
PAUSE = "admin:durabl_django_queueoverview_pause"
RESUME = "admin:durabl_django_queueoverview_resume"
SCHEDULES = "admin:durabl_django_jobschedule_changelist"


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


def test_staff_pause_and_resume_a_type_from_the_overview(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    queue.enqueue("email", {}, run_at=queue.backend.now() - timedelta(days=1))
    page = csrf_client.get(reverse(OVERVIEW))
    text = page.content.decode()
    assert f'action="{reverse(PAUSE)}"' in text and "durabl-lag durabl-lag-high" in text
    assert "lag is not an alarm while paused" in text

    form = {"type": "email", "csrfmiddlewaretoken": csrf_token(page)}
    response = csrf_client.post(reverse(PAUSE), form, follow=True)
    assert messages_of(response) == ["Paused job type “email”."]
    assert queue.paused_types() == ["email"]
    text = response.content.decode()
    assert "Paused: email." in text and 'durabl-paused"' in text
    assert "durabl-lag durabl-lag-high" not in text  # paused: the lag is no alarm
    assert f'action="{reverse(RESUME)}"' in text

    form["csrfmiddlewaretoken"] = csrf_token(response)
    response = csrf_client.post(reverse(RESUME), form, follow=True)
    assert messages_of(response) == ["Resumed job type “email”."]
    assert queue.paused_types() == []
    entries = LogEntry.objects.filter(user=superuser).order_by("pk")
    assert [(e.object_id, e.change_message) for e in entries] == [
        ("email", "Paused job type “email” from the admin."),
        ("email", "Resumed job type “email” from the admin."),
    ]


def test_a_paused_type_without_jobs_is_listed_on_the_overview(
    csrf_client: Client, queue: JobQueue
) -> None:
    queue.pause("quiet")
    text = csrf_client.get(reverse(OVERVIEW)).content.decode()
    assert 'title="quiet"' in text and "Paused: quiet." in text


def test_the_type_controls_need_the_cancel_permission(queue: JobQueue) -> None:
    viewer = Client()
    viewer.force_login(make_user("viewer", "view_job"))
    assert f'action="{reverse(PAUSE)}"' not in viewer.get(reverse(OVERVIEW)).content.decode()
    assert viewer.post(reverse(PAUSE), {"type": "email"}).status_code == 403
    assert queue.paused_types() == []


def test_staff_pause_resume_and_run_a_schedule_from_its_page(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    queue.schedule("nightly", "report", cron="0 3 * * *")
    page = csrf_client.get(reverse(SCHEDULES))
    form = {"name": "nightly", "csrfmiddlewaretoken": csrf_token(page)}
    paused = csrf_client.post(reverse("admin:durabl_django_jobschedule_pause"), form, follow=True)
    assert messages_of(paused) == ["Paused schedule “nightly”."]
    assert queue.list_schedules()[0].paused is True
    assert ">paused<" in paused.content.decode() and ">Resume<" in paused.content.decode()

    ran = csrf_client.post(reverse("admin:durabl_django_jobschedule_run"), form, follow=True)
    (message,) = messages_of(ran)
    assert message.startswith("Schedule “nightly” enqueued job ")
    assert [job.type for job in queue.list_jobs(type="report")] == ["report"]

    resumed = csrf_client.post(reverse("admin:durabl_django_jobschedule_resume"), form, follow=True)
    assert messages_of(resumed)[0].startswith("Resumed schedule “nightly”")
    assert queue.list_schedules()[0].paused is False
    actions = [e.change_message for e in LogEntry.objects.filter(user=superuser).order_by("pk")]
    assert len(actions) == 3 and all("nightly" in a for a in actions)

    gone = csrf_client.post(
        reverse("admin:durabl_django_jobschedule_pause"),
        {"name": "nope", "csrfmiddlewaretoken": form["csrfmiddlewaretoken"]},
        follow=True,
    )
    assert messages_of(gone)[0].startswith("Schedule not changed: no schedule named 'nope'")


def test_the_schedule_controls_need_their_permissions(queue: JobQueue) -> None:
    queue.schedule("nightly", "report", cron="0 3 * * *")
    viewer = Client()
    viewer.force_login(make_user("viewer", "view_job"))
    assert ">Run now<" not in viewer.get(reverse(SCHEDULES)).content.decode()
    for action in ("pause", "resume", "run"):
        url = reverse(f"admin:durabl_django_jobschedule_{action}")
        assert viewer.post(url, {"name": "nightly"}).status_code == 403
    assert queue.list_schedules()[0].paused is False
    assert queue.list_jobs(type="report") == []
