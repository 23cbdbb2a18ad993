"""Helpers for the admin tests (no tests here): more settings on the test's store, failed
jobs made by really running a failing handler, users with chosen permissions, and
readers for the pages."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, Permission, User
from django.http import HttpResponse

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


def make_user(name: str, *codenames: str) -> AbstractBaseUser:
    """A staff user holding the given ``durabl_django`` permissions."""
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="durabl_django", codename=codename)
        )
    return user


def rows(response: HttpResponse) -> list[str]:
    """The job ids a list page shows, top to bottom."""
    assert response.status_code == 200
    return re.findall(
        r'<th class="field-id[^"]*"><a href="[^"]*">([^<]*)</a></th>', response.content.decode()
    )


def csrf_token(response: HttpResponse) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.content.decode())
    assert match is not None, "no CSRF token on the page"
    return match.group(1)


def messages_of(response: HttpResponse) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []
