"""The admin's lists for every status, ``?status=``, the sidebar entry a job's page sits
under, sortable columns, search, the type filter, UTC timestamps and the schedules page."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import JobQueue
from durabl_django.admin_support import LISTED_STATUSES
from tests.django.test_admin_helpers import (
    XSS,
    changelist,
    complete_jobs,
    fail_jobs,
    make_user,
    messages_of,
    rows,
)

pytestmark = [pytest.mark.django_db, pytest.mark.on_real_mongo]

SECTIONS = {s: "job" if s == "failed" else f"{s}job" for s in LISTED_STATUSES}


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


def current_sidebar_entry(page: str) -> list[str]:
    """The model entries the navigation sidebar highlights."""
    return re.findall(r'<tr class="model-(\w+) current-model">', page)


def test_every_status_has_a_list_and_an_app_index_entry(
    admin_client: Client, queue: JobQueue
) -> None:
    assert {"pending", "active", "completed", "failed", "superseded"} <= set(LISTED_STATUSES)
    index = admin_client.get(reverse("admin:app_list", args=["durabl_django"])).content.decode()
    for status in LISTED_STATUSES:
        assert f'<a href="{changelist(status)}">{status.capitalize()} jobs</a>' in index
        page = admin_client.get(changelist(status)).content.decode()
        assert f"<h1>{status.capitalize()} jobs</h1>" in page
        assert current_sidebar_entry(page) == [SECTIONS[status]]
    assert '<a href="/admin/durabl_django/jobschedule/">Schedules</a>' in index


def test_completed_list_shows_completed_jobs(admin_client: Client, queue: JobQueue) -> None:
    done = complete_jobs(queue, 2)
    fail_jobs(queue, 1)
    queue.enqueue("ok", {"n": 9})
    response = admin_client.get(changelist("completed"))
    assert set(rows(response)) == set(done)
    page = response.content.decode()
    assert ">Finished</a></div>" in page and ">Created</a></div>" in page  # sortable headings
    assert "2 completed jobs" in page


def test_status_query_opens_that_list_keeping_the_filters(
    admin_client: Client, queue: JobQueue
) -> None:
    done = complete_jobs(queue, 1)
    fail_jobs(queue, 1)
    response = admin_client.get("/admin/durabl_django/job/", {"status": "completed", "q": "x"})
    assert response.status_code == 302
    assert response["Location"] == changelist("completed") + "?q=x"
    followed = admin_client.get("/admin/durabl_django/job/?status=completed", follow=True)
    assert rows(followed) == done
    assert "<h1>Completed jobs</h1>" in followed.content.decode()


def test_an_unknown_status_is_said_not_ignored(admin_client: Client, queue: JobQueue) -> None:
    response = admin_client.get("/admin/durabl_django/job/", {"status": XSS}, follow=True)
    [message] = messages_of(response)
    assert "There is no job status" in message and "completed" in message
    assert XSS not in response.content.decode()


def test_a_jobs_page_sits_under_its_status_entry(admin_client: Client, queue: JobQueue) -> None:
    [done] = complete_jobs(queue, 1)
    pending = queue.enqueue("email", {})
    assert pending is not None
    for job_id, status in ((done, "completed"), (pending, "pending")):
        response = admin_client.get(f"/admin/durabl_django/job/{job_id}/", follow=True)
        expected = reverse(f"admin:durabl_django_{SECTIONS[status]}_detail", args=[job_id])
        assert response.redirect_chain == [(expected, 302)]
        page = response.content.decode()
        assert current_sidebar_entry(page) == [SECTIONS[status]]
        assert f'<a href="{changelist(status)}">{status.capitalize()} jobs</a>' in page
        assert " UTC</div>" in page  # instants say their zone


def test_type_filter_lists_only_types_in_the_list(admin_client: Client, queue: JobQueue) -> None:
    complete_jobs(queue, 1, "ok")
    queue.enqueue("email", {})
    page = admin_client.get(changelist("completed")).content.decode()
    assert '<a href="?type=ok">ok</a>' in page
    assert "?type=email" not in page
    pending = admin_client.get(changelist("pending")).content.decode()
    assert '<a href="?type=email">email</a>' in pending and "?type=ok" not in pending


def test_columns_sort_through_the_store(admin_client: Client, queue: JobQueue) -> None:
    low = queue.enqueue("email", {"n": 1}, priority=1)
    high = queue.enqueue("email", {"n": 2}, priority=9)
    mid = queue.enqueue("email", {"n": 3}, priority=5)
    url = changelist("pending")
    assert rows(admin_client.get(url)) == [mid, high, low]  # newest first by default
    assert rows(admin_client.get(url, {"o": "priority"})) == [low, mid, high]
    page = admin_client.get(url, {"o": "-priority"})
    assert rows(page) == [high, mid, low]
    text = page.content.decode()
    # The sorted heading links to the other direction, the others to ascending.
    assert re.search(r'class="sortable sorted descending[^"]*"', text)
    assert 'href="?o=priority"' in text
    assert 'href="?o=type"' in text and 'href="?o=run_at"' in text
    # Sorting keeps the filters, and paging keeps the sort.
    filtered = admin_client.get(url, {"o": "priority", "type": "email"}).content.decode()
    assert 'href="?type=email&amp;o=-priority"' in filtered
    # An order that is not a sortable column is ignored.
    assert rows(admin_client.get(url, {"o": "data"})) == [mid, high, low]
    assert rows(admin_client.get(url, {"o": XSS})) == [mid, high, low]


def test_a_long_list_sorts_the_jobs_enqueued_last_and_says_so(
    admin_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durabl_django.views import lists

    monkeypatch.setattr(lists, "SORT_LIMIT", 2)
    low = queue.enqueue("email", {"n": 1}, priority=1)
    high = queue.enqueue("email", {"n": 2}, priority=9)
    url = changelist("pending")
    assert rows(admin_client.get(url, {"o": "priority"})) == [low, high]  # every job
    mid = queue.enqueue("email", {"n": 3}, priority=5)
    text = admin_client.get(url).content.decode()
    assert (
        "Sorting by Type, Priority, Attempts or Created sorts the 2 jobs enqueued "
        "last of 3. Filter by type or date to sort them all." in text
    )
    # Every column still sorts: the due time from its index, the others among the last 2.
    assert re.findall(r'href="\?o=([^"&]*)"', text) == [
        "type",
        "priority",
        "run_at",
        "attempts",
        "created_at",
    ]
    page = admin_client.get(url, {"o": "priority"})
    assert rows(page) == [mid, high]  # low, enqueued first, is not among the last two
    text = page.content.decode()
    assert (
        "Sorted by Priority: the 2 jobs enqueued last of 3 (no index serves this sort). "
        "Filter by type or date to sort them all." in text
    )
    assert "3 pending jobs" in text  # the count is of the whole list
    assert re.search(r'class="sortable sorted ascending[^"]*"', text)
    assert 'href="?o=-priority"' in text
    assert rows(admin_client.get(url, {"o": "-priority"})) == [high, mid]
    assert rows(admin_client.get(url, {"o": "-run_at"})) == [mid, high, low]  # the whole list
    narrowed = admin_client.get(url, {"o": "priority", "q": low or ""})
    assert rows(narrowed) == [low]
    assert "Filter by type or date" not in narrowed.content.decode()
    # A column of another list is no order of this one.
    assert rows(admin_client.get(changelist("completed"), {"o": "priority"})) == []


def test_a_long_finished_list_still_sorts_by_finish_time(
    admin_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durabl_django.views import lists

    monkeypatch.setattr(lists, "SORT_LIMIT", 1)
    # Enqueued a, b, c; finished c, b, a, each a millisecond after the one before.
    ids = {name: queue.enqueue(name, {}) for name in ("a", "b", "c")}
    last = None
    for name in ("c", "b", "a"):
        queue.register(name, lambda job, ctx: None)
        while last is not None and datetime.now(dt_timezone.utc) < last + timedelta(milliseconds=2):
            pass  # the next finish time is a later millisecond
        assert queue.run_pending(name) == 1
        job = queue.get_job(ids[name])
        assert job is not None and job.finished_at is not None
        last = job.finished_at
    url = changelist("completed")
    text = admin_client.get(url).content.decode()
    assert "sorts the 1 jobs that finished last of 3" in text
    assert rows(admin_client.get(url)) == [ids["a"], ids["b"], ids["c"]]  # newest finish first
    # Its index serves finish time: the whole list, both ways.
    assert rows(admin_client.get(url, {"o": "finished_at"})) == [ids["c"], ids["b"], ids["a"]]
    assert rows(admin_client.get(url, {"o": "-finished_at"})) == [ids["a"], ids["b"], ids["c"]]
    # Creation time: among the one that finished last only.
    assert rows(admin_client.get(url, {"o": "created_at"})) == [ids["a"]]


def test_a_broad_search_counts_to_its_limit_and_pages_through_that_many(
    admin_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durabl_django import admin_support
    from durabl_django.views import lists

    monkeypatch.setattr(admin_support, "SEARCH_COUNT_LIMIT", 3)
    for module in (admin_support, lists):
        monkeypatch.setattr(module, "PAGE_SIZE", 2)
    keys = [queue.enqueue("email", {"n": n}, dedupe_key=f"user:{n}") for n in range(5)]
    newest = list(reversed(keys))
    url = changelist("pending")
    page = admin_client.get(url, {"q": "user:", "o": "priority"})
    text = page.content.decode()
    assert "3+ results" in text
    assert "3+ pending jobs" in text
    assert "matches more than 3 jobs: the list shows the newest 3" in text
    assert 'href="?o=' not in text  # a capped search is not sorted
    assert rows(page) == newest[:2]  # newest first, 'o' dropped
    # The count stops at the limit: the last page ends there.
    assert rows(admin_client.get(url, {"q": "user:", "p": "2"})) == newest[2:3]
    assert rows(admin_client.get(url, {"q": "user:", "p": "3"})) == newest[2:3]
    # A search that does not fill its first page is counted by that page: exact.
    exact = admin_client.get(url, {"q": "user:1"}).content.decode()
    assert "1 result (" in exact and "3+ " not in exact
    two = admin_client.get(url, {"q": "user:", "type": "email", "p": "1"})
    assert "3+ results" in two.content.decode()


def test_failed_list_sorts_by_attempts_and_failure_time(
    admin_client: Client, queue: JobQueue
) -> None:
    first, second = fail_jobs(queue, 2)
    url = changelist("failed")
    assert rows(admin_client.get(url, {"o": "finished_at"})) == [first, second]
    assert rows(admin_client.get(url, {"o": "-finished_at"})) == [second, first]


def test_search_by_id_prefix_dedupe_key_and_error_text(
    admin_client: Client, queue: JobQueue
) -> None:
    [smtp] = fail_jobs(queue, 1, reason="SMTP 550: mailbox full")
    [other] = fail_jobs(queue, 1, reason="timeout", dedupe="user:7")
    url = changelist("failed")
    assert rows(admin_client.get(url, {"q": "mailbox full"})) == [smtp]
    assert rows(admin_client.get(url, {"q": "user:"})) == [other]
    assert smtp in rows(admin_client.get(url, {"q": smtp[:-3]}))
    assert rows(admin_client.get(url, {"q": XSS})) == []
    page = admin_client.get(url, {"q": XSS}).content.decode()
    assert XSS not in page and html.escape(XSS) in page


def test_times_say_how_long_ago_and_the_utc_instant(admin_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 1)
    queue.enqueue("email", {})
    queue.enqueue("email", {}, delay=7200)
    for status in ("failed", "pending"):
        page = admin_client.get(changelist(status)).content.decode()
        cells = re.findall(
            r'title="(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC">'
            r'<time datetime="([^"]*)">([^<]*)</time>',
            page,
        )
        assert cells, status
        for exact, machine, shown in cells:
            assert machine.endswith("+00:00") and machine.replace("T", " ")[:19] == exact
            assert re.fullmatch(r"now|\d+ (s|min) ago|in (1 h|\d+ min) \(delayed\)", shown), shown


def test_view_only_user_sees_lists_without_actions(client: Client, queue: JobQueue) -> None:
    client.force_login(make_user("viewer", "view_job"))
    complete_jobs(queue, 1)
    fail_jobs(queue, 1)
    for status in LISTED_STATUSES:
        page = client.get(changelist(status)).content.decode()
        assert 'name="action"' not in page and "action-select" not in page


def test_a_user_without_view_permission_gets_no_list(client: Client, queue: JobQueue) -> None:
    client.force_login(make_user("nobody"))
    for status in LISTED_STATUSES:
        assert client.get(changelist(status)).status_code == 403
    assert client.get(reverse("admin:durabl_django_jobschedule_changelist")).status_code == 403


# -- schedules ------------------------------------------------------------------------------


SCHEDULES = "admin:durabl_django_jobschedule_changelist"


def test_schedules_page_lists_next_and_last_run_and_links_the_last_job(
    admin_client: Client, queue: JobQueue
) -> None:
    assert "No schedules yet" in admin_client.get(reverse(SCHEDULES)).content.decode()
    queue.schedule("nightly <b>", "report", cron="0 3 * * *", data={"x": 1})
    queue.schedule("often", "ping", every=timedelta(minutes=5))
    page = admin_client.get(reverse(SCHEDULES)).content.decode()
    assert "nightly &lt;b&gt;" in page and "nightly <b>" not in page
    assert "cron 0 3 * * * (UTC)" in page and "every 5 min" in page
    assert ">Next run</th>" in page
    [schedule] = [s for s in queue.list_schedules() if s.name == "often"]
    assert schedule.next_run_at is not None
    # Fire it once: its last job is linked.
    from durabl.model.options import build_new_job

    new = build_new_job("ping", {}, now=schedule.next_run_at)
    fired = queue.backend.fire_schedule(
        schedule, schedule.next_run_at + timedelta(minutes=5), [(schedule.next_run_at, new)]
    )
    assert fired is not None and fired[0] is not None
    page = admin_client.get(reverse(SCHEDULES)).content.decode()
    job_url = reverse("admin:durabl_django_job_detail", args=[fired[0]])
    assert f'<a href="{job_url}" title="{fired[0]}">{fired[0]}</a>' in page


def test_date_filter_bounds_the_list(
    admin_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = fail_jobs(queue, 2)
    url = changelist("failed")
    page = admin_client.get(url).content.decode()
    assert "Failed: <" in page and '<a href="?d=1h">Past hour</a>' in page
    assert set(rows(admin_client.get(url, {"d": "1h"}))) == set(failed)
    assert set(rows(admin_client.get(url, {"d": "bogus"}))) == set(failed)  # ignored
    selected = admin_client.get(url, {"d": "7d"}).content.decode()
    assert '<li class="selected"><a href="?d=7d">Past 7 days</a></li>' in selected
    assert "Clear all filters" in selected
    # A window that ends before the jobs changed selects none of them.
    from durabl_django import admin_support

    monkeypatch.setitem(admin_support.DATE_RANGES, "1h", ("Past hour", timedelta(hours=-1)))
    assert rows(admin_client.get(url, {"d": "1h"})) == []
    pending = admin_client.get(changelist("pending")).content.decode()
    assert "Created: <" in pending
