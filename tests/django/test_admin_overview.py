"""The queue overview (also the Durabl section's own page): counts per type linked to
their lists, the last hour's charts, auto-refresh, and what it says when no worker runs;
and the workers page."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from types import SimpleNamespace

import pytest
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import JobQueue
from tests.django.test_admin_helpers import (
    XSS,
    changelist,
    complete_jobs,
    fail_jobs,
    overview_row,
)

pytestmark = [pytest.mark.django_db, pytest.mark.on_real_mongo]


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


OVERVIEW = "admin:durabl_django_queueoverview_changelist"


def test_overview_counts_link_to_every_list(admin_client: Client, queue: JobQueue) -> None:
    complete_jobs(queue, 2, "ok")
    page = admin_client.get(reverse("admin:durabl_django_queueoverview_changelist")).content
    text = page.decode()
    assert f'<a href="{changelist("completed")}?type=ok">2</a>' in text
    assert f'<a href="{changelist("completed")}">2</a>' in text  # the total row


def charts_of(page: str) -> dict[str, str]:
    """The overview's charts, by the (escaped) type each is of: their HTML."""
    return dict(
        re.findall(
            r'<figure class="durabl-chart">\s*<figcaption><span class="durabl-chart-type" '
            r'title="[^"]*">([^<]*)</span>(.*?)</figure>',
            page,
            re.S,
        )
    )


def test_overview_charts_the_last_hour_per_type(admin_client: Client, queue: JobQueue) -> None:
    complete_jobs(queue, 3, "ok")
    fail_jobs(queue, 2, XSS)
    page = admin_client.get(reverse(OVERVIEW)).content.decode()
    charts = charts_of(page)
    assert set(charts) == {"ok", html.escape(XSS)}
    assert "3 completed, 0 failed" in charts["ok"]
    assert "0 completed, 2 failed" in charts[html.escape(XSS)]
    # The newest bucket holds them; its bar reaches the top of its chart, whose scale
    # (0 to 3) and hour (60 minutes ago to now) are labelled.
    assert re.search(r'<rect class="durabl-bar-completed" x="[\d.]+" y="0\.0"', charts["ok"])
    assert "<title>the last 5 min: 3 completed, 0 failed; lag now: none</title>" in charts["ok"]
    axis = '<div class="durabl-y-axis" aria-hidden="true"><span>3</span><span>0</span>'
    assert axis in charts["ok"]
    assert "<span>\u221260 min</span>" in charts["ok"] and "<span>now</span>" in charts["ok"]
    assert XSS not in page


def test_overview_charts_the_oldest_pending_lag_over_the_hour(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job A is due 52 min ago and waits 20 min before it runs; job B, due 32 min ago, is
    still pending: the line reads A's wait, then B's, at the end of each 5 minutes."""
    from durabl import MemoryBackend
    from durabl.testing import FakeClock
    from durabl_django.views import overview

    start = datetime.now(dt_timezone.utc) - timedelta(minutes=52)
    clock = FakeClock(start)
    lagging = JobQueue(MemoryBackend(clock=clock))
    lagging.register("lag", lambda job, ctx: None)
    lagging.enqueue("lag", {"n": "a"})
    clock.advance(timedelta(minutes=20))
    assert lagging.run_pending("lag") == 1
    lagging.enqueue("lag", {"n": "b"})
    clock.advance(timedelta(minutes=32))
    monkeypatch.setattr(overview, "get_job_queue", lambda: lagging)

    page = admin_client.get(reverse(OVERVIEW)).content.decode()
    [chart] = charts_of(page).values()
    points = re.findall(r"; lag ([^:<]*): ([^<]*)</title>", chart)
    assert [(lag, when) for when, lag in points] == [
        ("none", "55 min ago"),  # before A was enqueued
        ("2 min", "50 min ago"),
        ("7 min", "45 min ago"),
        ("12 min", "40 min ago"),
        ("17 min", "35 min ago"),  # A runs 32 min ago; B is due then
        ("2 min", "30 min ago"),
        ("7 min", "25 min ago"),
        ("12 min", "20 min ago"),
        ("17 min", "15 min ago"),
        ("22 min", "10 min ago"),
        ("27 min", "5 min ago"),
        ("32 min", "now"),
    ]
    assert '<polyline class="durabl-lag-line"' in chart
    assert "1 completed, 0 failed, lag up to 32 min" in chart
    # The lag's own scale, on the right.
    lag_axis = '<div class="durabl-y-axis durabl-lag-axis" aria-hidden="true"><span>32 min</span>'
    assert lag_axis in chart


def test_overview_draws_no_lag_line_when_nothing_waited(
    admin_client: Client, queue: JobQueue
) -> None:
    complete_jobs(queue, 2, "ok")
    page = admin_client.get(reverse(OVERVIEW)).content.decode()
    assert "2 completed, 0 failed</span>" in page
    assert "durabl-lag-line" not in page.split("</style>", 1)[1]
    assert "durabl-lag-axis" not in page.split("</style>", 1)[1]


def test_overview_auto_refresh_toggle(admin_client: Client, queue: JobQueue) -> None:
    url = reverse(OVERVIEW)
    off = admin_client.get(url).content.decode()
    assert 'http-equiv="refresh"' not in off and f'<a href="{url}?refresh=10">' in off
    on = admin_client.get(url, {"refresh": "10"}).content.decode()
    assert '<meta http-equiv="refresh" content="10">' in on
    assert f'<a href="{url}?refresh=0">off</a>' in on
    odd = admin_client.get(url, {"refresh": "1"}).content.decode()
    assert 'http-equiv="refresh"' not in odd


WORKERS = "admin:durabl_django_workerprocess_changelist"


def _worker(host: str, types: dict[str, int], *, gone: bool = False) -> SimpleNamespace:
    now = datetime.now(dt_timezone.utc)
    return SimpleNamespace(
        id=f"{host}-1",
        host=host,
        pid=41,
        concurrency=types,
        started_at=now - timedelta(hours=1),
        last_seen=now,
        active=2,
        heartbeat_interval=10.0,
        gone=gone,
    )


def test_workers_page_lists_live_and_gone_workers(
    admin_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = [_worker("old-box", {"email": 1}, gone=True), _worker(XSS, {"email": 4, "ok": 2})]
    monkeypatch.setattr(queue, "list_workers", lambda: workers, raising=False)
    page = admin_client.get(reverse(WORKERS)).content.decode()
    found = re.findall(r'<tr class="durabl-worker( durabl-worker-gone)?">(.*?)</tr>', page, re.S)
    assert [bool(gone) for gone, _ in found] == [False, True]  # live ones first
    assert html.escape(XSS) in found[0][1] and XSS not in page
    types = ", ".join(
        f'<span class="durabl-item">{t} \u00d7 {n}</span>' for t, n in (("email", 4), ("ok", 2))
    )
    assert types in found[0][1] and ">alive<" in found[0][1]
    assert ">gone<" in found[1][1]
    monkeypatch.setattr(queue, "list_workers", lambda: [], raising=False)
    assert "No worker has registered" in admin_client.get(reverse(WORKERS)).content.decode()


def test_overview_says_when_no_live_worker_runs_a_waiting_type(
    admin_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.enqueue("email", {})
    queue.enqueue("orphan", {})
    workers = [_worker("box", {"email": 1}), _worker("dead", {"orphan": 1}, gone=True)]
    monkeypatch.setattr(queue, "list_workers", lambda: workers, raising=False)
    page = admin_client.get(reverse(OVERVIEW)).content.decode()
    email, orphan = overview_row(page, "email"), overview_row(page, "orphan")
    assert "no live worker runs this type" in orphan["type"]
    assert "no live worker" not in email["type"]
    # Some worker is alive: no banner saying that none is.
    assert "No worker is running" not in page


def test_overview_says_when_no_worker_runs_at_all(
    admin_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.enqueue("email", {})
    queue.enqueue("email", {})
    workers = [_worker("dead", {"email": 1}, gone=True)]
    monkeypatch.setattr(queue, "list_workers", lambda: workers, raising=False)
    page = admin_client.get(reverse(OVERVIEW)).content.decode()
    assert "No worker is running: 2 pending jobs wait for one." in page
    # The section's own page is the overview, banner included.
    index = admin_client.get(reverse("admin:app_list", args=["durabl_django"])).content.decode()
    assert "No worker is running: 2 pending jobs wait for one." in index
    assert overview_row(index, "email")["counts"]["Pending"] == 2


EVENTS = "admin:durabl_django_eventsubscription_changelist"


def test_events_page_lists_the_stored_subscriptions(admin_client: Client, queue: JobQueue) -> None:
    assert "No event subscriptions yet" in admin_client.get(reverse(EVENTS)).content.decode()
    queue.register("sync-invoice", lambda job, ctx: None, on_event=("billing/invoice.sync", XSS))
    page = admin_client.get(reverse(EVENTS)).content.decode()
    found = re.findall(r'<tr class="durabl-subscription">(.*?)</tr>', page, re.S)
    assert len(found) == 2 and all("sync-invoice" in row for row in found)
    assert "billing/invoice.sync" in page
    assert html.escape(XSS) in page and XSS not in page
