"""Django integration for durabl: settings, declared jobs, commands, admin, django.tasks.

::

    INSTALLED_APPS = [..., "durabl_django"]
    DURABL = {"URL": "sqlite:///durabl.sqlite3"}

    # myapp/jobs.py
    import durabl_django

    @durabl_django.job("welcome-email", concurrency=4)
    def welcome_email(job, ctx): ...

    @durabl_django.orchestration("restart-trial")
    def restart_trial(job, octx):
        customer = octx.step("ensure-customer", lambda keys, signal: ...)

    # a view
    durabl_django.enqueue_on_commit("welcome-email", {"user_id": user.pk})

Importing this package reads no settings and imports no models: the functions below load
what they need when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durabl_django.registry import job, orchestration

if TYPE_CHECKING:
    from durabl import JobQueue

__all__ = ["enqueue", "enqueue_on_commit", "get_queue", "job", "orchestration"]


def get_queue() -> JobQueue:
    """The default queue configured from ``settings.DURABL`` (built on first use)."""
    from durabl_django.runtime import get_queue

    return get_queue()


def enqueue(type: str, data: Any, **options: Any) -> str | None:
    """``get_queue().enqueue(type, data, **options)``: the job id, or None when its dedupe
    slot is taken. Options as :meth:`durabl.JobQueue.enqueue`."""
    from durabl_django.runtime import enqueue

    return enqueue(type, data, **options)


def enqueue_on_commit(
    type: str, data: Any, *, using: str | None = None, robust: bool = False, **options: Any
) -> None:
    """Enqueue once the current transaction on ``using`` commits (at once outside a
    transaction); nothing is enqueued on rollback. A bad option or payload raises here."""
    from durabl_django.runtime import enqueue_on_commit

    enqueue_on_commit(type, data, using=using, robust=robust, **options)
