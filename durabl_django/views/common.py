"""What every admin page shares: the cell a table shows, the admin's URLs and context,
and times shown relative to now with the exact UTC time on hover.

Job data reaches the templates as plain strings, which Django escapes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from durabl import WAIT_FOREVER, Job
from durabl_django.admin_support import LISTED_STATUSES, get_job_queue, humanize_seconds

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    from durabl import JobQueue

#: How many characters of a job id the breadcrumbs show (the styles show as many of the
#: ids in the pages, whole in their tooltip and copy button): enough to tell apart any
#: two jobs a page lists.
SHORT_ID = 8
NOWRAP, WIDE, CLIP = "durabl-nowrap", "durabl-wide", "durabl-clip"
# The cells of a job page's tables: a time, and text that wraps and keeps its line breaks.
LOG_AT, LOG_TEXT = "durabl-log-at", "durabl-log-message"
TITLES = {status: f"{status.capitalize()} jobs" for status in LISTED_STATUSES}
# The ModelAdmin (model name) whose entry lists jobs of each status.
SECTION_MODELS = {
    status: "job" if status == "failed" else f"{status}job" for status in LISTED_STATUSES
}
#: ``Job.waiting_for`` of a job that waits for a signal starts with it (the name follows).
SIGNAL_PREFIX = "signal:"
_JOB_FIELDS = frozenset(f.name for f in fields(Job))


@dataclass(frozen=True)
class Cell:
    """One table cell (``_cell.html``): plain text (escaped by the template), optionally
    linked; ``copy``: a job id (``_job_id.html``: shown short, with a button that
    copies it whole);
    ``when``: the UTC time the text describes (a ``<time>``, exact on hover); ``sub``: a
    second line under the text, cut to the cell's width (whole in its tooltip);
    ``items``: instead of ``text``, a list whose items never break inside; ``jobs``:
    instead of ``text``, job ids shown as ``copy`` shows one, each ``(id, url)``; ``cut``:
    the text on one line, as wide as the cell's class lets it or narrower when the row
    needs the room, cut with "…" (a ``title`` shows it whole)."""

    text: str
    url: str = ""
    title: str = ""
    css: str = ""
    copy: str = ""
    when: str = ""
    sub: str = ""
    sub_title: str = ""
    items: tuple[str, ...] = ()
    jobs: tuple[tuple[str, str], ...] = ()
    cut: bool = False


def detail_table(columns: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A table of a job's page (``_detail_table.html``): rows of ``css`` and ``cells``."""
    return {"columns": columns, "rows": rows}


@dataclass(frozen=True)
class Choice:
    display: str
    url: str
    selected: bool


def admin_url(name: str, *args: str) -> str:
    return reverse(f"admin:durabl_django_{name}", args=args)


def with_query(base: str, query: dict[str, str]) -> str:
    return f"{base}?{urlencode(query)}" if query else base


def short_id(job_id: str) -> str:
    return job_id[:SHORT_ID]


def id_cell(job_id: str, url: str = "") -> Cell:
    """A job id, linked, shown short, whole in its tooltip and its copy button."""
    return Cell(job_id, url=url, copy=job_id)


def detail_url(job_id: str) -> str:
    """The page of a job under its status's entry (the failed list's when it is gone)."""
    job = get_job_queue().get_job(job_id)
    section = SECTION_MODELS.get(job.status) if job is not None else None
    return admin_url(f"{section or 'job'}_detail", job_id)


def missing_job(request: HttpRequest, job_id: str) -> HttpResponse:
    """Django's own answer to a stale link: a message and the list."""
    messages.warning(request, f"Job with ID “{job_id}” doesn't exist. Perhaps it was deleted?")
    return HttpResponseRedirect(admin_url("job_changelist"))


def render(
    model_admin: ModelAdmin[Any], request: HttpRequest, template: str, context: dict[str, Any]
) -> TemplateResponse:
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, f"durabl_django/admin/{template}", context)


def base_context(model_admin: ModelAdmin[Any], request: HttpRequest, title: str) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "subtitle": None,
        "app_label": model_admin.opts.app_label,
    }


def format_time(value: datetime | None, *, zone: bool = False) -> str:
    """``2024-05-01 14:30:00`` in UTC, as durabl stores it (``zone``: followed by "UTC")."""
    if value is None:
        return ""
    if timezone.is_aware(value):
        value = value.astimezone(dt_timezone.utc)
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text} UTC" if zone else text


def relative_time(value: datetime, now: datetime | None = None) -> str:
    """``12 s ago``, ``4 min ago``, ``in 2 h``: the largest unit only (the exact time is
    in the tooltip); ``now`` within a second."""
    now = now or timezone.now()
    if timezone.is_naive(value):
        value = value.replace(tzinfo=dt_timezone.utc)
    seconds = (now - value).total_seconds()
    if abs(seconds) < 1:
        return "now"
    span = humanize_seconds(abs(seconds)).split(" ", 2)
    text = " ".join(span[:2])  # "4 min 12 s" -> "4 min"; "< 1 s" stays
    return f"{text} ago" if seconds > 0 else f"in {text}"


#: How a job's due time reads when it waits for a signal with no timeout.
WHEN_SIGNALLED = "when signalled (no timeout)"


def due_time_text(run_at: datetime) -> str | None:
    """:data:`WHEN_SIGNALLED` for a job waiting for a signal with no timeout (stored due at
    ``durabl.WAIT_FOREVER``), else None: the instant itself says when it is due."""
    return WHEN_SIGNALLED if run_at >= WAIT_FOREVER else None


def time_cell(value: datetime | None, empty: str, css: str = NOWRAP, note: str = "") -> Cell:
    """A time as "4 min ago" (``note`` after it), the exact UTC time in its tooltip."""
    if value is None:
        return Cell(empty)
    utc = value.astimezone(dt_timezone.utc) if timezone.is_aware(value) else value
    utc = utc.replace(microsecond=0)
    text = relative_time(value) + (f" {note}" if note else "")
    return Cell(text, title=format_time(value, zone=True), css=css, when=utc.isoformat())


def job_value(job: Job[Any], name: str) -> Any:
    """A field of the job record that not every release has (None when absent)."""
    return getattr(job, name, None) if name in _JOB_FIELDS else None


def has_job_field(name: str) -> bool:
    return name in _JOB_FIELDS


def finished_at(job: Job[Any]) -> datetime:
    """When a finished job finished (its last write, for a job read without the field)."""
    return job_value(job, "finished_at") or job.updated_at


def live_workers(queue: JobQueue) -> list[Any] | None:
    """The workers registry's entries (``queue.list_workers()``), or None for a durabl
    without the registry."""
    lister = getattr(queue, "list_workers", None)
    return None if lister is None else list(lister())


def waiting_since(job: Job[Any]) -> datetime | None:
    """When a job that waits (``Job.waiting_for``) suspended: the time of its journal's
    last entry, the wait's own (a sleep, a signal wait, a gather); None for one that
    waits for nothing."""
    if not job.waiting_for or not job.journal:
        return None
    at = job.journal[-1].get("at")
    return at if isinstance(at, datetime) else None
