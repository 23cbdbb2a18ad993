"""The admin's read-only pages: job lists (failed, pending, active), a job's detail page
and the queue overview. Retry and delete live in :mod:`durabl_django.admin_actions`.

Each view takes the ModelAdmin that mounts it (for the admin's context, URLs and
breadcrumbs). Job data reaches the templates as plain strings, which Django escapes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import dateformat, timezone

from durabl import FAILURE_KINDS, Job, QueueStats
from durabl_django.admin_support import (
    DELETE_PERMISSION,
    KIND_VAR,
    PAGE_SIZE,
    RETRY_PERMISSION,
    SEARCH_VAR,
    SELECTED,
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

NOWRAP, WIDE = "durabl-nowrap", "durabl-wide"
TITLES = {"failed": "Failed jobs", "pending": "Pending jobs", "active": "Active jobs"}
# The ModelAdmin (model name) whose entry lists jobs of each status.
SECTION_MODELS = {"failed": "job", "pending": "pendingjob", "active": "activejob"}


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
    """``2024-05-01 14:30:00`` in the current time zone (``zone``: and its name)."""
    if value is None:
        return ""
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return dateformat.format(value, "Y-m-d H:i:s T" if zone else "Y-m-d H:i:s")


def base_context(model_admin: ModelAdmin[Any], request: HttpRequest, title: str) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "subtitle": None,
        "app_label": model_admin.opts.app_label,
    }


# -- lists ------------------------------------------------------------------------------


def _columns(status: str) -> list[str]:
    if status == "failed":
        return ["Type", "Failure kind", "Reason", "Attempts", "Failed at", "Dedupe key"]
    if status == "pending":
        return ["Type", "Priority", "Run at", "Attempts", "Created at", "Dedupe key"]
    return ["Type", "Attempts", "Last update", "Created at", "Dedupe key"]


def _cells(job: Job[Any], empty: str) -> list[Cell]:
    key = Cell(job.dedupe_key or empty, title=job.dedupe_scope or "")
    if job.status == "failed":
        reason = job.fail_reason or ""
        return [
            Cell(job.type),
            Cell(kind_label(job.failure_kind) or empty),
            Cell(first_line(reason, 100) or empty, title=first_line(reason, 1000), css=WIDE),
            Cell(attempts_text(job), css=NOWRAP),
            Cell(format_time(job.updated_at), css=NOWRAP),
            key,
        ]
    if job.status == "pending":
        due = job.run_at <= timezone.now()
        return [
            Cell(job.type),
            Cell(str(job.priority)),
            Cell(format_time(job.run_at) + ("" if due else " (scheduled)"), css=NOWRAP),
            Cell(attempts_text(job), css=NOWRAP),
            Cell(format_time(job.created_at), css=NOWRAP),
            key,
        ]
    return [
        Cell(job.type),
        Cell(attempts_text(job), css=NOWRAP),
        Cell(format_time(job.updated_at), css=NOWRAP),
        Cell(format_time(job.created_at), css=NOWRAP),
        key,
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


def job_list(model_admin: ModelAdmin[Any], request: HttpRequest, status: str) -> HttpResponse:
    """A changelist-like page of the jobs with ``status``: filters, search, pagination;
    for failed jobs, row checkboxes and the retry/delete actions the user may run."""
    require(request)
    queue = get_job_queue()
    filters = JobFilters.from_query(status, request.GET)
    listing = JobListing(queue, filters)
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
    can_delete = status == "failed" and has_perm(request, DELETE_PERMISSION)
    if can_retry:
        actions.append(("retry_selected", "Retry selected failed jobs"))
    if can_delete:
        actions.append(("delete_selected", "Delete selected failed jobs"))
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
        "filter_specs": _filter_specs(filters, queue.job_types()),
        "clear_filters_url": "?" if filters.is_filtered else "",
        "clear_search_url": filters.querystring(search=None),
        "search_var": SEARCH_VAR,
        "hidden_params": [
            (k, v) for k, v in filters.params(with_page=False).items() if k != SEARCH_VAR
        ],
        "columns": _columns(status),
        "rows": rows,
        "page": page,
        "page_links": page_links,
        "result_count": paginator.count,
        "actions": actions,
        "action_checkbox_name": SELECTED,
        "retry_all_url": retry_all_url,
    }
    return render(model_admin, request, "job_list.html", context)


# -- detail -----------------------------------------------------------------------------


def job_detail(model_admin: ModelAdmin[Any], request: HttpRequest, job_id: str) -> HttpResponse:
    """Everything a job carries; retry/delete buttons for a failed job the user may act on."""
    require(request)
    job = get_job_queue().get_job(job_id)
    if job is None:
        return missing_job(request, job_id)
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
    ]
    section = job.status if job.status in SECTION_MODELS else None
    context = {
        **base_context(model_admin, request, f"Job {job.id}"),
        "job": job,
        "fields": fields,
        "payload": format_payload(job.data),
        "logs": [(format_time(entry.at, zone=True), entry.message) for entry in job.logs],
        "section_title": TITLES[section] if section else "",
        "section_url": admin_url(f"{SECTION_MODELS[section]}_changelist") if section else "",
        "retry_url": admin_url("job_retry_one", job.id)
        if failed and has_perm(request, RETRY_PERMISSION)
        else "",
        "delete_url": admin_url("job_delete_one", job.id)
        if failed and has_perm(request, DELETE_PERMISSION)
        else "",
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
    return {
        "label": label,
        "cells": [
            _count_cell(stats.pending, url(admin_url("pendingjob_changelist"))),
            _count_cell(stats.active, url(admin_url("activejob_changelist"))),
            Cell(str(stats.completed)),
            *by_kind,
            _count_cell(stats.failed, url(failed_url)),
            Cell(str(stats.superseded)),
        ],
        "lag": humanize_seconds(lag) if waiting else "\u2014",
        "is_total": job_type is None,
        "lag_high": high,
    }


def queue_overview(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Per type: pending, active, completed, failed by kind, superseded and the oldest
    pending job's lag, marked when it is above ``ADMIN_LAG_THRESHOLD``."""
    require(request)
    queue = get_job_queue()
    threshold = lag_threshold()
    rows = [_stats_row(t, t, queue.get_stats(t), threshold) for t in queue.job_types()]
    context = {
        **base_context(model_admin, request, "Queue overview"),
        "rows": rows,
        "total": _stats_row("Total", None, queue.get_stats(None), threshold),
        "kind_labels": [kind_label(k) for k in FAILURE_KINDS],
        "threshold": humanize_seconds(threshold),
    }
    return render(model_admin, request, "queue_overview.html", context)
