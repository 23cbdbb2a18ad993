"""Helpers for the admin tests (no tests here): more settings on the test's store, failed
jobs made by really running a failing handler, users with chosen permissions, and
readers for the pages."""

from __future__ import annotations

import html
import re
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, Permission, User
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

import durabl_django
from durabl import FatalJobError, Job, JobContext, JobQueue

XSS = "<script>alert(1)</script>"

# job id -> how its handler fails: {"reason": str, "log": str | None, "fatal": bool}
_PLANS: dict[str, dict[str, Any]] = {}


def store(settings: Any, **extra: Any) -> JobQueue:
    """``DURABL`` with ``extra`` settings, on the test's own store (``durabl_store``: a
    mongomock database, or one on the real MongoDB server); the configured queue."""
    settings.DURABL = {**settings.DURABL, **extra}
    return durabl_django.get_queue()


def _failing_handler(job: Job[Any], ctx: JobContext) -> None:
    plan = _PLANS.pop(job.id, {"reason": "boom", "log": None, "fatal": False})
    if plan["log"] is not None:
        ctx.log(plan["log"])
    if plan["fatal"]:
        raise FatalJobError(plan["reason"])
    raise RuntimeError(plan["reason"])


def fail_jobs(
    queue: JobQueue,
    count: int,
    type: str = "email",
    *,
    data: Any = None,
    reason: str = "boom",
    log: str | None = None,
    dedupe: str | None = None,
    fatal: bool = False,
) -> list[str]:
    """Enqueue ``count`` jobs (``max_attempts=1``) and run each through a failing handler,
    one by one: the ids, oldest failure first."""
    if type not in queue.processors:
        queue.register(type, _failing_handler)
    ids = []
    for n in range(count):
        key = dedupe if count == 1 or dedupe is None else f"{dedupe}{n}"
        job_id = queue.enqueue(
            type, {"n": n} if data is None else data, max_attempts=1, dedupe_key=key
        )
        assert job_id is not None
        _PLANS[job_id] = {"reason": reason, "log": log, "fatal": fatal}
        assert queue.run_pending(type) == 1
        ids.append(job_id)
    return ids


def complete_jobs(queue: JobQueue, count: int, type: str = "ok", **options: Any) -> list[str]:
    """Enqueue ``count`` jobs and run each to completion: the ids, oldest first."""

    def handler(job: Job[Any], ctx: JobContext) -> None:
        return None

    if type not in queue.processors:
        queue.register(type, handler)
    ids = []
    for n in range(count):
        job_id = queue.enqueue(type, {"n": n}, **options)
        assert job_id is not None
        assert queue.run_pending(type) == 1
        ids.append(job_id)
    return ids


def page_of(client: Client, job_id: str) -> str:
    """A job's admin page (following the redirect to its status's page), as text."""
    response = client.get(reverse("admin:durabl_django_job_detail", args=[job_id]), follow=True)
    assert response.status_code == 200
    return response.content.decode()


def changelist(status: str) -> str:
    """The URL of the list of ``status``'s jobs (the failed list is the placeholder's own)."""
    section = "job" if status == "failed" else f"{status}job"
    return reverse(f"admin:durabl_django_{section}_changelist")


def make_user(name: str, *codenames: str) -> AbstractBaseUser:
    """A staff user holding the given ``durabl_django`` permissions."""
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="durabl_django", codename=codename)
        )
    return user


ROW_ID = re.compile(
    r'<tr title="([^"]*)">\s*(?:<td class="action-checkbox">.*?</td>\s*)?'
    r'<th class="field-id"><a href="[^"]*">([^<]*)</a></th>'
    r'<td class="durabl-copy-cell"><button [^>]*data-copy="([^"]*)"',
    re.S,
)


def rows(response: HttpResponse) -> list[str]:
    """The job ids a list page shows, top to bottom: each whole in its link (the styles
    show its first 8 characters), in its row's tooltip and in its copy button."""
    assert response.status_code == 200
    found = ROW_ID.findall(response.content.decode())
    for tooltip, linked, copied in found:
        assert tooltip == linked == copied, (tooltip, linked, copied)
    return [linked for _, linked, _ in found]


def csrf_token(response: HttpResponse) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.content.decode())
    assert match is not None, "no CSRF token on the page"
    return match.group(1)


def messages_of(response: HttpResponse) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def overview_row(page: str, label: str) -> dict[str, Any]:
    """The queue overview's row of a type (or "Total"): ``counts`` (each column's count
    by its heading), ``links`` (the href of each linked count), ``kinds`` (the failures
    by kind under the failed count: label -> count, and their links in ``links``),
    ``lag`` (the lag cell, as HTML) and ``type`` (the type cell, as HTML)."""
    headings = re.findall(r'<th scope="col" class="durabl-count">([^<]*)</th>', page)
    for row in re.findall(r'<tr[^>]*>\s*<th scope="row" class="durabl-type">.*?</tr>', page, re.S):
        head = re.search(r'<th scope="row" class="durabl-type">(.*?)</th>', row, re.S)
        assert head is not None
        name = re.search(r'<span class="durabl-type-name"[^>]*>([^<]*)</span>', head.group(1))
        if name is None or html.unescape(name.group(1)) != label:
            continue
        cells = re.findall(r'<td class="durabl-count">(.*?)</td>', row, re.S)
        counts = {}
        for heading, cell in zip(headings, cells, strict=True):
            count = re.match(r"(?:<a [^>]*>)?(\d+)", cell)
            assert count is not None, cell
            counts[heading] = int(count.group(1))
        kinds = {
            kind: int(n)
            for kind, n in re.findall(
                r'<span class="durabl-kind"><a [^>]*>([^<:]*): (\d+)</a>', row
            )
        }
        lag = re.search(r'<td class="durabl-lag[^"]*"[^>]*>.*?</td>', row, re.S)
        assert lag is not None
        return {
            "counts": counts,
            "kinds": kinds,
            "links": [html.unescape(h) for h in re.findall(r'<a href="([^"]*)"', row)],
            "lag": lag.group(0),
            "type": head.group(1),
        }
    raise AssertionError(f"no overview row {label!r}")
