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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from durabl_django.registry import job

if TYPE_CHECKING:
    from durabl import JobQueue, Seconds
    from durabl.orchestrator import Body

    B = TypeVar("B", bound=Body)

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


def orchestration(
    type: str,
    *,
    concurrency: int = 1,
    poll_interval: Seconds | None = None,
    heartbeat_interval: Seconds | None = None,
    step_timeout: Seconds | None = None,
    max_duration: Seconds | None = None,
    max_journal_bytes: int | None = None,
) -> Callable[[B], B]:
    """Declare ``body(job, octx)`` as the orchestration for jobs of ``type``; starts
    nothing. ``manage.py runworkers`` runs it with a
    ``durabl.orchestrator.OrchestrationHandler``; see
    :func:`durabl_django.registry.orchestration`."""
    from durabl_django.registry import orchestration

    return orchestration(
        type,
        concurrency=concurrency,
        poll_interval=poll_interval,
        heartbeat_interval=heartbeat_interval,
        step_timeout=step_timeout,
        max_duration=max_duration,
        max_journal_bytes=max_journal_bytes,
    )
