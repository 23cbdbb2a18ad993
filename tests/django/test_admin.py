"""The durabl admin's pages: lists (filters, search, pagination), detail, overview,
permissions and escaping. Actions are in ``test_admin_actions.py``."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import JobQueue
from durabl_django.admin_support import first_line, format_payload, humanize_seconds
from tests.django.test_admin_helpers import (
    XSS,
    fail_jobs,
    make_user,
    messages_of,
    overview_row,
    rows,
    store,
)

pytestmark = [pytest.mark.django_db, pytest.mark.on_real_mongo]


@pytest.fixture
def queue() -> JobQueue:
    """The configured queue on this test's fresh store, with no handlers of the test app."""
    return durabl_django.get_queue()


FAILED = "admin:durabl_django_job_changelist"
PENDING = "admin:durabl_django_pendingjob_changelist"
ACTIVE = "admin:durabl_django_activejob_changelist"
OVERVIEW = "admin:durabl_django_queueoverview_changelist"


def detail(job_id: str) -> str:
    return reverse("admin:durabl_django_job_detail", args=[job_id])


def test_every_page_renders_for_a_superuser(admin_client: Client, queue: JobQueue) -> None:
    [failed] = fail_jobs(queue, 1)
    pending = queue.enqueue("email", {"to": "a@example.com"})
    handle = queue.claim_or_enqueue("report", {"n": 1})
    assert pending is not None and handle is not None
    for url in (
        reverse("admin:index"),
        reverse("admin:app_list", args=["durabl_django"]),
        reverse(FAILED),
        reverse(PENDING),
        reverse(ACTIVE),
        reverse(OVERVIEW),
        reverse("admin:durabl_django_completedjob_changelist"),
        reverse("admin:durabl_django_supersededjob_changelist"),
        reverse("admin:durabl_django_jobschedule_changelist"),
        detail(failed),
        detail(pending),
        detail(handle.id),
    ):
        response = admin_client.get(url, follow=True)
        assert response.status_code == 200, url


def test_app_index_lists_the_four_pages(admin_client: Client, queue: JobQueue) -> None:
    page = admin_client.get(reverse("admin:app_list", args=["durabl_django"])).content.decode()
    for name, url in [
        ("Failed jobs", FAILED),
        ("Queue overview", OVERVIEW),
        ("Pending jobs", PENDING),
        ("Active jobs", ACTIVE),
    ]:
        assert f'<a href="{reverse(url)}">{name}</a>' in page


def test_placeholder_changelist_is_the_failed_list(admin_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 2)
    response = admin_client.get("/admin/durabl_django/job/")
    assert response.status_code == 200
    assert "<h1>Failed jobs</h1>" in response.content.decode()
    assert len(rows(response)) == 2


def test_failed_list_shows_the_columns(admin_client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1, reason="first line\nsecond line", dedupe="user-7")
    page = admin_client.get(reverse(FAILED)).content.decode()
    assert f'<th class="field-id"><a href="{detail(job_id)}">{job_id}</a></th>' in page
    for text in ("Retries exhausted", "1/1", "user-7"):
        assert f">{text}</td>" in page
    # The reason's first line under the type, whole in its tooltip.
    assert '>email<span class="durabl-sub" title="RuntimeError: first line">' in page
    assert "second line" not in page


def test_filters_by_type_and_failure_kind(admin_client: Client, queue: JobQueue) -> None:
    emails = fail_jobs(queue, 2, "email")
    reports = fail_jobs(queue, 1, "report")
    fatal = fail_jobs(queue, 1, "report", fatal=True)
    assert set(rows(admin_client.get(reverse(FAILED), {"type": "email"}))) == set(emails)
    assert set(rows(admin_client.get(reverse(FAILED), {"type": "report"}))) == {*reports, *fatal}
    by_kind = admin_client.get(reverse(FAILED), {"type": "report", "kind": "fatal"})
    assert rows(by_kind) == fatal
    stalled = admin_client.get(reverse(FAILED), {"kind": "stalled"})
    assert rows(stalled) == []
    assert "No failed jobs match these filters." in stalled.content.decode()
    # An unknown kind is ignored rather than an error.
    assert len(rows(admin_client.get(reverse(FAILED), {"kind": "bogus"}))) == 4


def test_filter_sidebar_offers_types_and_kinds(admin_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 1, "email")
    queue.enqueue("report", {})
    page = admin_client.get(reverse(FAILED), {"type": "email"}).content.decode()
    assert '<li class="selected"><a href="?type=email">email</a></li>' in page
    # Only types with jobs in this list: "report" has a pending job, no failed one.
    assert "?type=report" not in page
    assert '<a href="?type=email&amp;kind=fatal">Fatal</a>' in page
    assert "Clear all filters" in page


def test_search_matches_an_id_or_a_dedupe_key_prefix(admin_client: Client, queue: JobQueue) -> None:
    a = fail_jobs(queue, 1, dedupe="customer-42:invoice")
    b = fail_jobs(queue, 1, dedupe="customer-43:invoice")
    fail_jobs(queue, 1)
    assert rows(admin_client.get(reverse(FAILED), {"q": a[0]})) == a
    assert rows(admin_client.get(reverse(FAILED), {"q": "customer-4"})) == [*b, *a]
    response = admin_client.get(reverse(FAILED), {"q": "customer-43"})
    assert rows(response) == b
    assert "1 result" in response.content.decode()
    assert rows(admin_client.get(reverse(FAILED), {"q": "invoice"})) == []


def test_failed_list_is_newest_first_and_paginated(admin_client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 55)
    newest_first = list(reversed(ids))
    first = admin_client.get(reverse(FAILED))
    assert rows(first) == newest_first[:50]
    page = first.content.decode()
    assert "55 failed jobs" in page
    assert '<a href="?p=2" class="end">2</a>' in page
    assert rows(admin_client.get(reverse(FAILED), {"p": "2"})) == newest_first[50:]
    # Out-of-range and junk page numbers land on a real page.
    assert rows(admin_client.get(reverse(FAILED), {"p": "9"})) == newest_first[50:]
    assert rows(admin_client.get(reverse(FAILED), {"p": "x"})) == newest_first[:50]


def test_pagination_keeps_the_filters(admin_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 51, "email")
    page = admin_client.get(reverse(FAILED), {"type": "email", "q": ""}).content.decode()
    assert '<a href="?type=email&amp;p=2" class="end">2</a>' in page


def test_pending_list_offers_only_delete_and_active_list_nothing(
    admin_client: Client, queue: JobQueue
) -> None:
    pending = queue.enqueue("email", {}, dedupe_key="welcome:1")
    later = queue.enqueue("email", {}, delay=3600)
    handle = queue.claim_or_enqueue("report", {})
    assert pending and later and handle
    response = admin_client.get(reverse(PENDING))
    assert set(rows(response)) == {pending, later}
    page = response.content.decode()
    assert "(delayed)</time>" in page and "welcome:1" in page
    assert "Delete selected pending jobs" in page and "Retry" not in page
    assert rows(admin_client.get(reverse(PENDING), {"q": "welcome"})) == [pending]
    assert rows(admin_client.get(reverse(PENDING), {"type": "report"})) == []
    active = admin_client.get(reverse(ACTIVE))
    assert rows(active) == [handle.id]
    active_page = active.content.decode()
    assert "Cancel selected active jobs" in active_page and "Delete selected" not in active_page
    handle.release()


def test_detail_page_shows_everything_a_failed_job_carries(
    admin_client: Client, queue: JobQueue
) -> None:
    when = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    data = {"user": {"id": 7, "tags": ["a", "b"]}, "blob": b"\x00\xff", "when": when}
    [job_id] = fail_jobs(
        queue, 1, data=data, reason="Traceback:\n  line 1\nValueError: nope", log="sent 3 of 4"
    )
    response = admin_client.get(detail(job_id))
    page = response.content.decode()
    payload = re.search(r'<pre class="durabl-pre durabl-payload">(.*?)</pre>', page, re.S)
    assert payload is not None
    assert json.loads(html.unescape(payload.group(1))) == {
        "user": {"id": 7, "tags": ["a", "b"]},
        "blob": "<2 bytes: 00ff>",
        "when": "2024-05-01T12:30:00+00:00",
    }
    assert '<pre class="durabl-pre durabl-reason">RuntimeError: Traceback:\n  line 1\n' in page
    assert "1 of 1" in page
    assert "sent 3 of 4" in page
    assert ">Retries exhausted</div>" in page
    assert ">Failed at:</label>" in page
    assert reverse("admin:durabl_django_job_retry_one", args=[job_id]) in page
    assert reverse("admin:durabl_django_job_delete_one", args=[job_id]) in page
    assert f'<a href="{reverse(FAILED)}">Failed jobs</a>' in page


def test_detail_page_of_a_pending_job_offers_delete_only(
    admin_client: Client, queue: JobQueue
) -> None:
    job_id = queue.enqueue("email", {"to": "x"}, dedupe_key="k1", priority=-5)
    assert job_id is not None
    page = admin_client.get(detail(job_id), follow=True).content.decode()
    assert ">pending</div>" in page and ">-5</div>" in page and ">k1</div>" in page
    assert ">Retry</a>" not in page
    delete = reverse("admin:durabl_django_pendingjob_delete_one", args=[job_id])
    assert f'<a href="{delete}">Delete</a>' in page
    assert f'<a href="{reverse(PENDING)}">Pending jobs</a>' in page
    assert "No log lines." in page


def test_detail_page_of_a_sleeping_orchestration_says_until_when(
    admin_client: Client, queue: JobQueue
) -> None:
    from durabl import Orchestrator

    orch = Orchestrator(queue)
    wake = datetime(2099, 12, 24, tzinfo=timezone.utc)
    orch.define("advent", lambda job, octx: octx.sleep_until("eve", wake), start=False)
    queue.register("advent", orch.definitions["advent"].handler)
    job_id = queue.enqueue("advent", {})
    assert job_id is not None and queue.run_pending() == 1
    page = admin_client.get(detail(job_id), follow=True).content.decode()
    assert "Waiting for" in page and ">until 2099-12-24T00:00:00Z</div>" in page
    plain = queue.enqueue("email", {"to": "x"})
    assert "Waiting for" not in admin_client.get(detail(plain or ""), follow=True).content.decode()


def test_detail_of_a_missing_job_redirects_with_a_message(
    admin_client: Client, queue: JobQueue
) -> None:
    response = admin_client.get(detail("0123456789abcdef01234567"), follow=True)
    assert response.redirect_chain == [(reverse(FAILED), 302)]
    assert messages_of(response) == [
        "Job with ID “0123456789abcdef01234567” doesn't exist. Perhaps it was deleted?"
    ]


def test_overview_counts_per_type_with_totals(admin_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 2, "email")
    fail_jobs(queue, 1, "email", fatal=True)
    queue.enqueue("email", {})
    queue.enqueue("report", {})
    response = admin_client.get(reverse(OVERVIEW))
    page = response.content.decode()
    email = overview_row(page, "email")
    assert email["counts"] == {
        "Pending": 1,
        "Active": 0,
        "Completed": 0,
        "Failed": 3,
        "Superseded": 0,
        **({"Cancelled": 0} if "Cancelled" in email["counts"] else {}),
    }
    # The failures by kind under the failed count, each linked to its filtered list;
    # a kind with none is left out.
    assert email["kinds"] == {"retries exhausted": 2, "fatal": 1}
    assert f"{reverse(FAILED)}?type=email&kind=fatal" in email["links"]
    total = overview_row(page, "Total")
    assert total["counts"]["Pending"] == 2 and total["counts"]["Failed"] == 3
    assert "<tfoot>" in page.split('<span class="durabl-type-name">Total</span>')[0]


def test_overview_marks_a_lag_above_the_threshold(admin_client: Client, settings: Any) -> None:
    queue = store(settings, ADMIN_LAG_THRESHOLD=600)
    queue.enqueue("slow", {}, run_at=datetime.now(timezone.utc) - timedelta(hours=2))
    queue.enqueue("fast", {})
    page = admin_client.get(reverse(OVERVIEW)).content.decode()
    slow, fast = overview_row(page, "slow")["lag"], overview_row(page, "fast")["lag"]
    assert "durabl-lag-high" in slow and "(over 10 min)" in slow and "2 h" in slow
    assert "durabl-lag-high" not in fast


def test_anonymous_users_are_sent_to_the_login_page(client: Client, queue: JobQueue) -> None:
    response = client.get(reverse(FAILED))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_the_view_permission_gets_403(client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1)
    client.force_login(make_user("staff"))
    for url in (reverse(FAILED), reverse(PENDING), reverse(ACTIVE), reverse(OVERVIEW)):
        assert client.get(url).status_code == 403, url
    assert client.get(detail(job_id)).status_code == 403
    index = client.get(reverse("admin:index")).content.decode()
    assert "Failed jobs" not in index


def test_view_permission_alone_shows_no_retry_or_delete(client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1)
    client.force_login(make_user("viewer", "view_job"))
    listing = client.get(reverse(FAILED))
    assert listing.status_code == 200 and rows(listing) == [job_id]
    page = listing.content.decode()
    assert 'name="action"' not in page and "action-select" not in page
    assert "Retry all" not in page
    detail_page = client.get(detail(job_id)).content.decode()
    assert "/retry/" not in detail_page and "/delete/" not in detail_page
    assert "Failed jobs" in client.get(reverse("admin:index")).content.decode()


def test_retry_permission_offers_retry_but_not_delete(client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1)
    client.force_login(make_user("retrier", "view_job", "retry_job"))
    page = client.get(reverse(FAILED)).content.decode()
    assert 'value="retry_selected"' in page and 'value="delete_selected"' not in page
    detail_page = client.get(detail(job_id)).content.decode()
    assert "/retry/" in detail_page and "/delete/" not in detail_page


def test_permissions_exist_for_the_placeholder(db: None) -> None:
    codenames = set(
        Permission.objects.filter(content_type__app_label="durabl_django").values_list(
            "codename", flat=True
        )
    )
    assert codenames == {"view_job", "delete_job", "retry_job", "cancel_job"}


def test_everything_a_job_carries_is_escaped(admin_client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(
        queue, 1, XSS, data={"html": XSS}, reason=XSS, log=XSS, dedupe=XSS, fatal=True
    )
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    pages = [
        admin_client.get(reverse(FAILED)),
        admin_client.get(reverse(FAILED), {"q": XSS, "type": XSS}),
        admin_client.get(detail(job_id)),
        admin_client.get(reverse(OVERVIEW)),
        admin_client.get(reverse("admin:durabl_django_job_retry"), {"_selected_action": job_id}),
        admin_client.get(reverse("admin:durabl_django_job_retry_one", args=[job_id])),
    ]
    for response in pages:
        page = response.content.decode()
        assert response.status_code == 200
        assert XSS not in page
        assert escaped in page


def test_formatting_helpers() -> None:
    assert humanize_seconds(0.2) == "< 1 s"
    assert humanize_seconds(42) == "42 s"
    assert humanize_seconds(252) == "4 min 12 s"
    assert humanize_seconds(7500) == "2 h 5 min"
    assert humanize_seconds(3 * 86400 + 4 * 3600) == "3 d 4 h"
    assert first_line("\n  boom  \nmore") == "boom"
    assert first_line("x" * 200, 10) == "x" * 9 + "\u2026"
    assert (
        format_payload({"b": b"ab", "s": {1}})
        == '{\n  "b": "<2 bytes: 6162>",\n  "s": [\n    1\n  ]\n}'
    )
    assert format_payload("x" * 300_000).endswith("more characters not shown)")
