"""An orchestration's page lists the signals it received (the wait step, the data, when
sent and received; a wait whose timeout passed says so) and the events it sent (the
step, the event, a link to each job it started). Read from the job's journal."""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import Job, JobQueue, Orchestrator
from durabl.orchestrator import OrchestrationContext
from durabl.orchestrator.journal import step_entry
from tests.django.test_admin_helpers import XSS, page_of

pytestmark = [pytest.mark.django_db]

EVENT = "billing/invoice.sync"


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


def table_rows(page: str, css: str) -> list[str]:
    return re.findall(rf'<tr class="{css}">(.*?)</tr>', page, re.S)


def approval(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.send_event("sync", EVENT, {"invoice_id": 7})
    octx.wait_for_signal("await approval", "approve")
    octx.wait_for_signal("await second look", "review", timeout=0)


def orchestration(queue: JobQueue, type: str, body: Any) -> str:
    orch = Orchestrator(queue)
    orch.define(type, body, start=False)
    queue.register(type, orch.definitions[type].handler)
    job_id = queue.enqueue(type, {}) or ""
    assert queue.run_pending(type) == 1
    return job_id


def test_the_page_lists_the_events_sent_and_the_signals_received(
    admin_client: Client, queue: JobQueue
) -> None:
    queue.register("sync-invoice", lambda job, ctx: None, on_event=EVENT)
    job_id = orchestration(queue, "approval", approval)
    (started,) = [j.id for j in queue.list_jobs(type="sync-invoice")]

    waiting = page_of(admin_client, job_id)
    assert "Events sent" in waiting
    (event,) = table_rows(waiting, "durabl-event-sent")
    assert ">sync<" in event and EVENT in event
    started_url = reverse("admin:durabl_django_job_detail", args=[started])
    assert f'href="{started_url}"' in event
    assert "Signals received" in waiting and "No signal received yet." in waiting
    # A wait with no timeout is stored due at WAIT_FOREVER: said in words, not as year 9000.
    assert "when signalled (no timeout)" in waiting and "9000" not in waiting
    pending = admin_client.get(reverse("admin:durabl_django_pendingjob_changelist"))
    assert "when signalled (no timeout)" in pending.content.decode()

    assert queue.signal(job_id, "approve", {"by": "ana", "note": XSS})
    assert queue.run_pending("approval") == 1
    job = queue.get_job(job_id)
    assert job is not None and job.status == "completed"

    done = page_of(admin_client, job_id)
    received, timed_out = re.findall(
        r'<tr class="durabl-signal-received( durabl-timed-out)?">(.*?)</tr>', done, re.S
    )
    assert received[0] == "" and ">await approval<" in received[1]
    assert ">approve<" in received[1] and "&quot;by&quot;: &quot;ana&quot;" in received[1]
    assert html.escape(XSS) in received[1] and XSS not in done
    assert timed_out[0] and ">await second look<" in timed_out[1]
    assert ">review<" in timed_out[1] and ">timed out<" in timed_out[1]
    assert "No signal received yet." not in done
    # The started job's link leads to its page (under its own status's entry).
    assert started in page_of(admin_client, started)


def test_the_sections_are_left_out_without_a_send_or_a_wait(
    admin_client: Client, queue: JobQueue
) -> None:
    job_id = orchestration(queue, "plain", lambda job, octx: octx.step("one", lambda k, s: 1))
    page = page_of(admin_client, job_id)
    assert "Orchestration steps" in page
    assert "Signals received" not in page and "Events sent" not in page


def test_a_send_journaled_without_its_event_name_is_only_a_step(
    admin_client: Client, queue: JobQueue
) -> None:
    """A journal an earlier durabl wrote: the send step names no event."""
    handle = queue.claim_or_enqueue("older", {})
    assert handle is not None
    at = datetime.now(timezone.utc)
    entry = step_entry(0, "sync", ["job-1"], key="k0", at=at, attempt=1)
    assert handle.append_journal([entry], position=0) == "applied"
    page = page_of(admin_client, handle.id)
    assert "Orchestration steps" in page and "Events sent" not in page
