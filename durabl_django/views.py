"""The admin's read-only pages: job lists (failed, pending, active), a job's detail page
and the queue overview. Retry and delete live in :mod:`durabl_django.admin_actions`.

Each view takes the ModelAdmin that mounts it (for the admin's context, URLs and
breadcrumbs). Job data reaches the templates as plain strings, which Django escapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.text import get_text_list

from durabl import (
    FAILURE_KINDS,
    TERMINAL_STATUSES,
    Job,
    QueueStats,
    Schedule,
    served_by_index,
    total_stats,
)
from durabl_django.admin_support import (
    CANCEL_PERMISSION,
    DATE_RANGES,
    DELETE_PERMISSION,
    KIND_VAR,
    LISTED_STATUSES,
    PAGE_SIZE,
    RETRY_PERMISSION,
    SEARCH_VAR,
    SELECTED,
    SORT_LIMIT,
    STATUS_VAR,
    TYPE_VAR,
    JobFilters,
    JobListing,
    attempts_text,
    first_line,
    format_payload,
    get_job_queue,
    has_perm,
    humanize_seconds,
    kind_label,
    require,
)

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    from durabl import JobQueue

NOWRAP, WIDE, CLIP = "durabl-nowrap", "durabl-wide", "durabl-clip"
LOG_AT, LOG_TEXT = "durabl-log-at", "durabl-log-message"
TIME = "durabl-time"  # a list's timestamp: it wraps between the date and the time only
TITLES = {status: f"{status.capitalize()} jobs" for status in LISTED_STATUSES}
# The ModelAdmin (model name) whose entry lists jobs of each status.
SECTION_MODELS = {
    status: "job" if status == "failed" else f"{status}job" for status in LISTED_STATUSES
}
_JOB_FIELDS = frozenset(f.name for f in fields(Job))


@dataclass(frozen=True)
class Cell:
    """One table cell: plain text (escaped by the template), optionally linked."""

    text: str
    url: str = ""
    title: str = ""
    css: str = ""


@dataclass(frozen=True)
class Choice:
    display: str
    url: str
    selected: bool


def admin_url(name: str, *args: str) -> str:
    return reverse(f"admin:durabl_django_{name}", args=args)


def with_query(base: str, query: dict[str, str]) -> str:
    return f"{base}?{urlencode(query)}" if query else base


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


def format_time(value: datetime | None, *, zone: bool = False) -> str:
    """``2024-05-01 14:30:00`` in UTC, as durabl stores it (``zone``: followed by "UTC";
    lists say it once, in the column's heading)."""
    if value is None:
        return ""
    if timezone.is_aware(value):
        value = value.astimezone(dt_timezone.utc)
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text} UTC" if zone else text


def job_value(job: Job[Any], name: str) -> Any:
    """A field of the job record that not every release has (None when absent)."""
    return getattr(job, name, None) if name in _JOB_FIELDS else None


def base_context(model_admin: ModelAdmin[Any], request: HttpRequest, title: str) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "subtitle": None,
        "app_label": model_admin.opts.app_label,
    }


# -- lists ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A list column: its heading and the ``list_jobs`` order it sorts by, if any."""

    label: str
    order: str | None = None


def _columns(status: str) -> list[Column]:
    key = Column("Dedupe key")
    if status == "failed":
        return [
            Column("Type", "type"),
            Column("Failure kind"),
            Column("Reason"),
            Column("Attempts", "attempts"),
            Column("Failed at (UTC)", "finished_at"),
            key,
        ]
    if status == "pending":
        return [
            Column("Type", "type"),
            Column("Priority", "priority"),
            Column("Run at (UTC)", "run_at"),
            Column("Attempts", "attempts"),
            Column("Created at (UTC)", "created_at"),
            key,
        ]
    if status == "active":
        worker = [Column("Worker")] if "worker" in _JOB_FIELDS else []
        return [
            Column("Type", "type"),
            *worker,
            Column("Attempts", "attempts"),
            Column("Last update (UTC)", "updated_at"),
            Column("Created at (UTC)", "created_at"),
            key,
        ]
    return [
        Column("Type", "type"),
        Column("Attempts", "attempts"),
        Column("Finished at (UTC)", "finished_at"),
        Column("Created at (UTC)", "created_at"),
        key,
    ]


def _finished(job: Job[Any]) -> datetime:
    """When a finished job finished (its last write, for a job read without the field)."""
    return job_value(job, "finished_at") or job.updated_at


def _cells(job: Job[Any], empty: str) -> list[Cell]:
    key = Cell(job.dedupe_key or empty, title=job.dedupe_key or "", css=CLIP)
    if job.status == "failed":
        reason = job.fail_reason or ""
        return [
            Cell(job.type),
            Cell(kind_label(job.failure_kind) or empty),
            Cell(first_line(reason, 100) or empty, title=first_line(reason, 1000), css=WIDE),
            Cell(attempts_text(job), css=NOWRAP),
            Cell(format_time(_finished(job)), css=TIME),
            key,
        ]
    if job.status == "pending":
        due = job.run_at <= timezone.now()
        return [
            Cell(job.type),
            Cell(str(job.priority)),
            Cell(format_time(job.run_at) + ("" if due else " (scheduled)"), css=TIME),
            Cell(attempts_text(job), css=NOWRAP),
            Cell(format_time(job.created_at), css=TIME),
            key,
        ]
    workers = []  # active: who runs it; finished: nothing
    if job.status == "active" and "worker" in _JOB_FIELDS:
        worker = job_value(job, "worker")
        workers = [Cell(worker or empty, title=worker or "", css=CLIP)]
    return [
        Cell(job.type),
        *workers,
        Cell(attempts_text(job), css=NOWRAP),
        Cell(format_time(job.updated_at if job.status == "active" else _finished(job)), css=TIME),
        Cell(format_time(job.created_at), css=TIME),
        key,
    ]


def _headers(filters: JobFilters, sortable: Callable[[str], bool]) -> list[dict[str, Any]]:
    """Each column's heading; a sortable one links to its order, ascending first, and
    a sorted one to the other direction (none links where the list is too long to sort
    by that column)."""
    headers = []
    for column in _columns(filters.status):
        header: dict[str, Any] = {"label": column.label, "url": "", "sorted": ""}
        if column.order is not None and sortable(column.order):
            current = filters.order
            if current == column.order:
                header["sorted"], target = "ascending", "-" + column.order
            elif current == "-" + column.order:
                header["sorted"], target = "descending", column.order
            else:
                target = column.order
            header["url"] = filters.querystring(order=target)
        headers.append(header)
    return headers


def _unfiltered(filters: JobFilters) -> JobFilters:
    """The same list and order, without type, failure kind or search."""
    return replace(filters, type=None, failure_kind=None, search=None, since=None)


def _types_listed(queue: JobQueue, status: str) -> list[str]:
    """The types with at least one job of ``status``: the type filter's choices (one job
    looked up per type, in ``run_at`` order, which the stores' (type, status, run_at)
    index serves; never a count)."""
    return [
        t
        for t in queue.job_types()
        if queue.list_jobs(status=status, type=t, order="run_at", limit=1)
    ]


def _filter_specs(filters: JobFilters, job_types: list[str]) -> list[dict[str, Any]]:
    types = sorted({*job_types, *([filters.type] if filters.type else [])})
    specs: list[dict[str, Any]] = [
        {
            "title": "type",
            "choices": [Choice("All", filters.querystring(type=None), filters.type is None)]
            + [Choice(t, filters.querystring(type=t), filters.type == t) for t in types],
        }
    ]
    since = filters.since
    label = {"pending": "created", "active": "created", "failed": "failed"}.get(
        filters.status, "finished"
    )
    specs.append(
        {
            "title": label,
            "choices": [Choice("Any date", filters.querystring(since=None), since is None)]
            + [
                Choice(title, filters.querystring(since=key), since == key)
                for key, (title, _) in DATE_RANGES.items()
            ],
        }
    )
    if filters.status == "failed":
        kind = filters.failure_kind
        specs.append(
            {
                "title": "failure kind",
                "choices": [Choice("All", filters.querystring(failure_kind=None), kind is None)]
                + [
                    Choice(kind_label(k), filters.querystring(failure_kind=k), kind == k)
                    for k in FAILURE_KINDS
                ],
            }
        )
    return specs


def status_redirect(request: HttpRequest) -> HttpResponse | None:
    """``job/?status=...``: the list of that status (the failed list is this page), with
    the other filters kept; an unknown status is said so, not silently ignored."""
    status = request.GET.get(STATUS_VAR)
    if status is None or status == "failed":
        return None
    if status not in SECTION_MODELS:
        known = ", ".join(LISTED_STATUSES)
        messages.warning(request, f"There is no job status “{status}”; the statuses are {known}.")
        return HttpResponseRedirect(admin_url("job_changelist"))
    query = request.GET.copy()
    del query[STATUS_VAR]
    if status != "failed":
        query.pop(KIND_VAR, None)
    base = admin_url(f"{SECTION_MODELS[status]}_changelist")
    return HttpResponseRedirect(f"{base}?{query.urlencode()}" if query else base)


def job_list(model_admin: ModelAdmin[Any], request: HttpRequest, status: str) -> HttpResponse:
    """A changelist-like page of the jobs with ``status``: filters, search, pagination;
    for failed jobs, row checkboxes and the retry/delete actions the user may run."""
    require(request)
    queue = get_job_queue()
    filters = JobFilters.from_query(status, request.GET)
    listing = JobListing(queue, filters)
    total = listing.total()
    short = total <= SORT_LIMIT

    orders = {c.order: c.label for c in _columns(status) if c.order}

    def sortable(field: str) -> bool:
        # Any column of the list, but not a capped search (it shows its newest matches).
        return not listing.capped and field in orders

    def whole(field: str) -> bool:
        # An order an index serves (durabl.model.rules.INDEXED_ORDERS) pages as fast at
        # any length; any other reads every job it sorts: a long list sorts its first
        # SORT_LIMIT jobs in its own order.
        return short or served_by_index(status, field)

    last = "that finished last" if status in TERMINAL_STATUSES else "enqueued last"
    sort_note = ""
    ordered = None if filters.order is None else filters.order.removeprefix("-")
    if listing.capped:
        sort_note = (
            f"This search matches more than {total:,} jobs: the list shows the "
            f"newest {total:,} and cannot be sorted. Search for more of the id "
            "or key, or filter by type or date."
        )
    elif ordered is not None and sortable(ordered) and not whole(ordered):
        sort_note = (
            f"Sorted by {orders[ordered]}: the {SORT_LIMIT:,} jobs {last} of {total:,} (no index "
            "serves this sort). Filter by type or date to sort them all."
        )
        listing = JobListing(queue, filters, count=total, among_newest=SORT_LIMIT)
    elif not short:
        partial = [label for order, label in orders.items() if not whole(order)]
        sort_note = (
            f"Sorting by {get_text_list(partial, 'or')} sorts the {SORT_LIMIT:,} jobs "
            f"{last} of {total:,}. Filter by type or date to sort them all."
        )
    if ordered is not None and not sortable(ordered):
        filters = replace(filters, order=None)
        listing = JobListing(queue, filters, count=total, capped=listing.capped)
    paginator: Paginator[Job[Any]] = Paginator(listing, PAGE_SIZE)
    page = paginator.get_page(filters.page)
    filters = replace(filters, page=page.number)
    empty = model_admin.get_empty_value_display()
    section = SECTION_MODELS[status]
    rows = [
        {
            "id": job.id,
            "url": admin_url(f"{section}_detail", job.id),
            "cells": _cells(job, empty),
        }
        for job in page.object_list
    ]
    actions: list[tuple[str, str]] = []
    can_retry = status == "failed" and has_perm(request, RETRY_PERMISSION)
    can_delete = status != "active" and has_perm(request, DELETE_PERMISSION)
    if can_retry:
        actions.append(("retry_selected", "Retry selected failed jobs"))
    if can_delete:
        actions.append(("delete_selected", f"Delete selected {status} jobs"))
    if status in ("pending", "active") and has_perm(request, CANCEL_PERMISSION):
        actions.append(("cancel_selected", f"Cancel selected {status} jobs"))
    if status == "pending" and has_perm(request, RETRY_PERMISSION):
        actions.append(("run_now_selected", "Run selected delayed jobs now"))
    retry_all_url = ""
    if can_retry and paginator.count:
        query = {**filters.params(with_page=False), "select_across": "1"}
        retry_all_url = with_query(admin_url("job_retry"), query)
    page_links = [
        {
            "number": number,
            "url": filters.querystring(page=number) if isinstance(number, int) else "",
            "current": number == page.number,
        }
        for number in paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
        if paginator.num_pages > 1
    ]
    context = {
        **base_context(model_admin, request, TITLES[status]),
        "status": status,
        "filters": filters,
        "filter_specs": _filter_specs(filters, _types_listed(queue, status)),
        "clear_filters_url": replace(
            filters, type=None, failure_kind=None, search=None
        ).querystring()
        if filters.is_filtered
        else "",
        "clear_search_url": filters.querystring(search=None),
        "search_var": SEARCH_VAR,
        "hidden_params": [
            (k, v) for k, v in filters.params(with_page=False).items() if k != SEARCH_VAR
        ],
        "headers": _headers(filters, sortable),
        "sort_note": sort_note,
        "rows": rows,
        "page": page,
        "page_links": page_links,
        "result_count": paginator.count,
        "result_count_label": listing.count_label(),
        "result_plural": "" if paginator.count == 1 and not listing.capped else "s",
        "actions": actions,
        "action_checkbox_name": SELECTED,
        "retry_all_url": retry_all_url,
    }
    return render(model_admin, request, "job_list.html", context)


# -- detail -----------------------------------------------------------------------------


def _duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    return humanize_seconds(max((end - start).total_seconds(), 0.0))


def _attempt_of(history: tuple[Any, ...], at: datetime) -> int | None:
    """The number of the recorded attempt whose run covers ``at``."""
    for attempt in history:
        started = attempt.started_at
        if started is not None and started <= at <= attempt.ended_at:
            return int(attempt.number)
    return None


def _table(columns: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A table of a job's page (``_detail_table.html``): rows of ``css`` and ``cells``."""
    return {"columns": columns, "rows": rows}


def _timeline(job: Job[Any], empty: str) -> dict[str, Any]:
    """The attempt history, oldest first: number, worker, start, duration, outcome, error."""
    rows = [
        {
            "css": f"durabl-attempt durabl-outcome-{a.outcome}",
            "cells": [
                Cell(str(a.number)),
                Cell(a.worker or empty, css=LOG_TEXT),
                Cell(
                    format_time(a.started_at) or empty,
                    title=f"ended {format_time(a.ended_at)} UTC",
                    css=LOG_AT,
                ),
                Cell(_duration(a.started_at, a.ended_at) or empty, css=NOWRAP),
                Cell(str(a.outcome)),
                Cell(a.error or "", css=LOG_TEXT),
            ],
        }
        for a in job_value(job, "attempt_history") or ()
    ]
    columns = ["Attempt", "Worker", "Started (UTC)", "Took", "Outcome", "Error"]
    return _table(columns, rows)


def _steps(job: Job[Any], empty: str) -> dict[str, Any]:
    """The orchestration's journaled steps and sleeps: name, the attempt that ran it, how
    long it took (from the previous entry of that attempt, or the attempt's start), and
    whether a later attempt was served it from the journal ("replayed")."""
    if not job.journal:
        return _table([], [])
    from durabl.orchestrator.journal import decode

    records, _ = decode(job.journal)
    history = job_value(job, "attempt_history") or ()
    starts = {int(a.number): a.started_at for a in history if a.started_at is not None}
    last_attempt = max([job.attempts, *starts], default=0)
    steps: list[dict[str, Any]] = []
    previous: dict[int, datetime] = {}
    for record in records:
        attempt = record.attempt
        start = None
        if attempt is not None:
            start = previous.get(attempt, starts.get(attempt))
            if record.at is not None:
                previous[attempt] = record.at
        replayed = attempt is not None and attempt < last_attempt
        name = record.name if record.kind == "step" else f"{record.name} ({record.kind})"
        cells = [
            Cell(str(record.seq)),
            Cell(name, css=LOG_TEXT),
            Cell(str(attempt) if attempt is not None else empty),
            Cell(format_time(record.at) or empty, css=LOG_AT),
            Cell(_duration(start, record.at) or empty, css=NOWRAP),
            Cell(f"replayed in attempt {last_attempt}" if replayed else ""),
        ]
        steps.append({"css": "durabl-step", "cells": cells})
    return _table(["#", "Step", "Attempt", "Journaled (UTC)", "Took", "Replayed"], steps)


def _run_fields(job: Job[Any], empty: str) -> list[tuple[str, str]]:
    """Duration and, for an active job, who runs it and until when its lease holds."""
    fields: list[tuple[str, str]] = []
    history = job_value(job, "attempt_history") or ()
    if history:
        last = history[-1]
        fields.append(("Runs recorded", str(len(history))))
        if job.status != "active":
            fields.append(("Last run took", _duration(last.started_at, last.ended_at) or empty))
    if job.status in ("completed", "failed", "superseded", "cancelled"):
        fields.append(("Created to finished", _duration(job.created_at, _finished(job))))
    if job.status == "active":
        for label, name in (("Worker", "worker"), ("Last heartbeat", "heartbeat_at")):
            if name in _JOB_FIELDS:
                value = job_value(job, name)
                text = format_time(value, zone=True) if isinstance(value, datetime) else value
                fields.append((label, text or empty))
        if "lease_expires_at" in _JOB_FIELDS:
            expires = job_value(job, "lease_expires_at")
            text = format_time(expires, zone=True) or empty
            if expires is not None and expires < timezone.now():
                text += " (expired: the reaper will recover it)"
            fields.append(("Lease expires", text))
    return fields


def _job_actions(request: HttpRequest, job: Job[Any], section: str | None) -> list[dict[str, str]]:
    """The buttons of a job's page: each action its status allows and the user may run."""
    if section is None:
        return []
    delayed = job.status == "pending" and job.run_at > timezone.now()
    offered = [
        ("Retry", "retry", job.status == "failed", RETRY_PERMISSION, "button"),
        ("Run now", "run_now", delayed, RETRY_PERMISSION, "button"),
        ("Cancel", "cancel", job.status in ("pending", "active"), CANCEL_PERMISSION, "button"),
        ("Delete", "delete", job.status != "active", DELETE_PERMISSION, "deletelink"),
    ]
    return [
        {"label": label, "url": admin_url(f"{section}_{name}_one", job.id), "css": css}
        for label, name, allowed, permission, css in offered
        if allowed and has_perm(request, permission)
    ]


def job_detail(model_admin: ModelAdmin[Any], request: HttpRequest, job_id: str) -> HttpResponse:
    """Everything a job carries; retry/delete buttons for a failed job the user may act on."""
    require(request)
    job = get_job_queue().get_job(job_id)
    if job is None:
        return missing_job(request, job_id)
    section = SECTION_MODELS.get(job.status)
    if section is not None and section != model_admin.opts.model_name:
        # Shown under its status's entry, so the sidebar and breadcrumbs say where it is.
        return HttpResponseRedirect(admin_url(f"{section}_detail", job.id))
    empty = model_admin.get_empty_value_display()
    failed = job.status == "failed"
    fields = [
        ("ID", job.id),
        ("Type", job.type),
        ("Status", job.status),
        ("Failure kind", kind_label(job.failure_kind) or empty),
        ("Attempts", f"{job.attempts} of {job.max_attempts}"),
        ("Priority", str(job.priority)),
        ("Dedupe key", job.dedupe_key if job.dedupe_key is not None else empty),
        ("Dedupe scope", job.dedupe_scope or empty),
        ("Run at", format_time(job.run_at, zone=True)),
        ("Created at", format_time(job.created_at, zone=True)),
        ("Failed at" if failed else "Updated at", format_time(job.updated_at, zone=True)),
        (
            "Backoff",
            f"{job.backoff}, {job.backoff_delay:g} s base, at most {job.backoff_max_delay:g} s",
        ),
        *_run_fields(job, empty),
    ]
    history = job_value(job, "attempt_history") or ()
    has_result = "result" in _JOB_FIELDS and job.status == "completed"
    context = {
        **base_context(model_admin, request, f"Job {job.id}"),
        "job": job,
        "fields": fields,
        "payload": format_payload(job.data),
        "logs": _table(
            ["At", "Attempt", "Message"],
            [
                {
                    "cells": [
                        Cell(format_time(entry.at, zone=True), css=LOG_AT),
                        Cell(str(_attempt_of(history, entry.at) or empty)),
                        Cell(entry.message, css=LOG_TEXT),
                    ]
                }
                for entry in job.logs
            ],
        ),
        "timeline": _timeline(job, empty),
        "steps": _steps(job, empty),
        "has_result": has_result,
        "result": format_payload(job_value(job, "result")) if has_result else "",
        "section_title": TITLES[job.status] if section else "",
        "section_url": admin_url(f"{section}_changelist") if section else "",
        "job_actions": _job_actions(request, job, section),
        # A job that ran again after a failure keeps that failure's reason: say so.
        "reason_heading": "Failure reason"
        if job.status in ("failed", "superseded", "cancelled")
        else "An earlier attempt's failure",
    }
    return render(model_admin, request, "job_detail.html", context)


# -- overview ---------------------------------------------------------------------------


def lag_threshold() -> float:
    from durabl_django.conf import durabl_settings

    return durabl_settings.seconds("ADMIN_LAG_THRESHOLD")


def _count_cell(count: int, url: str) -> Cell:
    return Cell(str(count), url=url if count else "")


def _stats_row(
    label: str, job_type: str | None, stats: QueueStats, threshold: float
) -> dict[str, Any]:
    failed_url = admin_url("job_changelist")

    def url(base: str, **query: str) -> str:
        if job_type is not None:
            query = {TYPE_VAR: job_type, **query}
        return with_query(base, query)

    by_kind = [
        _count_cell(stats.failed_by_kind.get(kind, 0), url(failed_url, **{KIND_VAR: kind}))
        for kind in FAILURE_KINDS
    ]
    waiting = stats.pending > 0 and stats.oldest_pending_run_at is not None
    lag = stats.oldest_pending_lag if waiting else 0.0
    high = waiting and lag > threshold
    cancelled = (
        [
            _count_cell(
                int(getattr(stats, "cancelled", 0)), url(admin_url("cancelledjob_changelist"))
            )
        ]
        if "cancelled" in LISTED_STATUSES
        else []
    )
    return {
        "label": label,
        "cells": [
            _count_cell(stats.pending, url(admin_url("pendingjob_changelist"))),
            _count_cell(stats.active, url(admin_url("activejob_changelist"))),
            _count_cell(stats.completed, url(admin_url("completedjob_changelist"))),
            *by_kind,
            _count_cell(stats.failed, url(failed_url)),
            _count_cell(stats.superseded, url(admin_url("supersededjob_changelist"))),
            *cancelled,
        ],
        "lag": humanize_seconds(lag) if waiting else "\u2014",
        "is_total": job_type is None,
        "lag_high": high,
        "pending": stats.pending,
        "no_worker": False,
    }


CHART_BUCKETS = 12  # the last hour in 5-minute bars
CHART_BUCKET = timedelta(minutes=5)
CHART_MAX_TYPES = 20
CHART_WIDTH, CHART_HEIGHT = 240, 48
REFRESH_CHOICES = (0, 10, 30, 60)  # seconds between reloads of the overview (0: off)


def _bars(counts: list[int], peak: int, offset: float, css: str) -> list[dict[str, Any]]:
    slot = CHART_WIDTH / len(counts)
    bars = []
    for n, count in enumerate(counts):
        height = round(CHART_HEIGHT * count / peak, 1) if peak else 0
        bars.append(
            {
                "x": round(n * slot + offset, 1),
                "y": round(CHART_HEIGHT - height, 1),
                "width": round(slot / 2 - 1, 1),
                "height": height,
                "count": count,
                "css": css,
                "minutes_ago": (len(counts) - n) * 5,
            }
        )
    return bars


def _lag_line(lags: list[float]) -> dict[str, Any]:
    """The lag as a line over the bars, on its own scale: each point at its bucket's end."""
    peak = max(lags, default=0.0)
    slot = CHART_WIDTH / len(lags)
    points = []
    for n, lag in enumerate(lags):
        y = CHART_HEIGHT - (CHART_HEIGHT - 2) * lag / peak if peak else CHART_HEIGHT
        minutes_ago = (len(lags) - 1 - n) * 5
        points.append(
            {
                "x": round((n + 1) * slot, 1),
                "y": round(y, 1),
                "lag": humanize_seconds(lag) if lag else "none",
                "when": f"{minutes_ago} min ago" if minutes_ago else "now",
            }
        )
    return {
        "peak": humanize_seconds(peak) if peak else "",
        "points": points,
        "polyline": " ".join(f"{point['x']},{point['y']}" for point in points),
    }


def _activity(queue: JobQueue, job_types: list[str]) -> list[dict[str, Any]]:
    """Per type, completions and failures in each 5-minute bucket of the last hour, as
    bars of a server-rendered SVG chart, and the oldest pending lag at each bucket's end as
    a line: one store read for every type (``queue.activity``)."""
    shown = job_types[:CHART_MAX_TYPES]
    activity = queue.activity(shown, buckets=CHART_BUCKETS, width=CHART_BUCKET)
    charts = []
    for job_type in shown:
        done, failed = list(activity[job_type].completed), list(activity[job_type].failed)
        peak = max([*done, *failed, 0])
        half = CHART_WIDTH / CHART_BUCKETS / 2
        charts.append(
            {
                "type": job_type,
                "completed": sum(done),
                "failed": sum(failed),
                "bars": _bars(done, peak, 0, "durabl-bar-completed")
                + _bars(failed, peak, half, "durabl-bar-failed"),
                "lag": _lag_line(list(activity[job_type].lag)),
            }
        )
    return charts


def queue_overview(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Per type: pending, active, completed, failed by kind, superseded and the oldest
    pending job's lag, marked when it is above ``ADMIN_LAG_THRESHOLD``; a chart of the
    last hour's completions and failures; ``?refresh=N`` reloads the page every N s."""
    require(request)
    queue = get_job_queue()
    threshold = lag_threshold()
    job_types = queue.job_types()
    by_type = queue.stats_by_type()  # one read; a type only this process handles has none
    rows = [_stats_row(t, t, by_type.get(t) or QueueStats(), threshold) for t in job_types]
    workers = live_workers(queue)
    if workers is not None:  # say so when waiting jobs have nobody to run them
        served = {t for w in workers if not w.gone for t in w.concurrency}
        for row in rows:
            row["no_worker"] = row["pending"] > 0 and row["label"] not in served
    try:
        refresh = int(request.GET.get("refresh", "0"))
    except ValueError:
        refresh = 0
    if refresh not in REFRESH_CHOICES:
        refresh = 0
    context = {
        "charts": _activity(queue, job_types),
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "refresh": refresh,
        "refresh_choices": [
            (seconds, f"every {seconds} s" if seconds else "off", f"?refresh={seconds}")
            for seconds in REFRESH_CHOICES
        ],
        **base_context(model_admin, request, "Queue overview"),
        "rows": rows,
        "total": _stats_row("Total", None, total_stats(by_type.values()), threshold),
        "kind_labels": [kind_label(k) for k in FAILURE_KINDS],
        "show_cancelled": "cancelled" in LISTED_STATUSES,
        "threshold": humanize_seconds(threshold),
    }
    return render(model_admin, request, "queue_overview.html", context)


# -- schedules --------------------------------------------------------------------------


def _every_text(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return f"cron {schedule.cron} ({schedule.timezone})"
    if schedule.every is not None:
        return f"every {humanize_seconds(schedule.every)}"
    return ""


def schedule_list(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Every stored schedule: its job type, when it fires, its next and last tick, and the
    job its last tick enqueued (linked)."""
    require(request)
    queue = get_job_queue()
    empty = model_admin.get_empty_value_display()
    supported = queue.backend.supports_schedules
    schedules = queue.list_schedules() if supported else []
    rows = []
    for schedule in schedules:
        last_job = schedule.last_job_id
        rows.append(
            {
                "name": schedule.name,
                "cells": [
                    Cell(schedule.type),
                    Cell(_every_text(schedule)),
                    Cell(format_time(schedule.next_run_at) or empty),
                    Cell(format_time(schedule.last_run_at) or empty),
                    Cell(
                        last_job or empty,
                        url=admin_url("job_detail", last_job) if last_job else "",
                        css=CLIP,
                    ),
                ],
            }
        )
    context = {
        **base_context(model_admin, request, "Schedules"),
        "rows": rows,
        "supported": supported,
        "columns": ["Name", "Job type", "Fires", "Next run (UTC)", "Last run (UTC)", "Last job"],
        "table_css": "durabl-schedules",
    }
    return render(model_admin, request, "schedule_list.html", context)


# -- workers ----------------------------------------------------------------------------


def live_workers(queue: JobQueue) -> list[Any] | None:
    """The workers registry's entries (``queue.list_workers()``), or None for a durabl
    without the registry."""
    lister = getattr(queue, "list_workers", None)
    return None if lister is None else list(lister())


def worker_list(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Every worker process the store knows, live ones first: host, pid, the types it runs
    (with their threads), runs in progress, when it started and was last seen."""
    require(request)
    queue = get_job_queue()
    workers = live_workers(queue)
    rows = []
    for worker in sorted(workers or [], key=lambda w: (bool(w.gone), w.host, w.pid)):
        concurrency = dict(worker.concurrency)
        rows.append(
            {
                "css": "durabl-worker durabl-worker-gone" if worker.gone else "durabl-worker",
                "cells": [
                    Cell(str(worker.host)),
                    Cell(str(worker.pid)),
                    Cell(", ".join(f"{t} \u00d7 {n}" for t, n in sorted(concurrency.items()))),
                    Cell(str(worker.active)),
                    Cell(format_time(worker.started_at)),
                    Cell(format_time(worker.last_seen)),
                    Cell("gone" if worker.gone else "alive"),
                ],
            }
        )
    context = {
        **base_context(model_admin, request, "Workers"),
        "rows": rows,
        "supported": workers is not None,
        "columns": [
            "Host",
            "PID",
            "Types (threads)",
            "Running",
            "Started (UTC)",
            "Last seen (UTC)",
            "State",
        ],
        "table_css": "durabl-workers",
    }
    return render(model_admin, request, "worker_list.html", context)
