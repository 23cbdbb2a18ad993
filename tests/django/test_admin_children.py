"""Parents and children in the admin: a parent's page counts its children by status,
each count linking to that status's list filtered to them; a child's page links to its
parent; a list given ``?parent=`` shows only that job's children."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import Child, Job, JobQueue, Orchestrator
from durabl.orchestrator import OrchestrationContext

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


@pytest.fixture
def client(csrf_client: Client) -> Client:
    """The conftest's logged-in superuser (CSRF checked, as a browser's POSTs are)."""
    return csrf_client


def fan(queue: JobQueue) -> str:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.gather("fan-in", octx.start_children("fan-out", [Child("leaf", {"n": 1})] * 3))

    orch = Orchestrator(queue)
    orch.define("fan", body, start=False)
    queue.register("fan", orch.definitions["fan"].handler)
    parent = queue.enqueue("fan", {}) or ""
    assert queue.run_pending("fan") == 1
    return parent


def test_a_parent_page_counts_its_children_and_a_child_page_links_its_parent(
    client: Client, queue: JobQueue
) -> None:
    parent = fan(queue)
    queue.register("leaf", lambda job, ctx: None)
    queue.run_pending("leaf", limit=1)
    page = client.get(reverse("admin:durabl_django_pendingjob_detail", args=[parent]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "Parent and children" in html and "children:fan-in" in html
    pending_list = reverse("admin:durabl_django_pendingjob_changelist")
    assert f'href="{pending_list}?parent={parent}">2 pending</a>' in html
    assert ">1 completed</a>" in html

    child = next(c for c in queue.list_jobs(parent_id=parent) if c.status == "pending")
    page = client.get(reverse("admin:durabl_django_pendingjob_detail", args=[child.id]))
    html = page.content.decode()
    assert f'title="{parent}">{parent}</a>' in html and "(step fan-out#" in html


def test_a_list_filtered_by_parent_shows_only_its_children(client: Client, queue: JobQueue) -> None:
    parent = fan(queue)
    other = queue.enqueue("leaf", {"n": 2}) or ""
    page = client.get(reverse("admin:durabl_django_pendingjob_changelist"), {"parent": parent})
    html = page.content.decode()
    assert page.status_code == 200
    for child in queue.list_jobs(parent_id=parent):
        assert child.id in html
    assert other not in html
