"""The job lists, one per status: filters, search, sortable columns, pagination, and for
the lists with actions, row checkboxes and the actions the user may run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import timezone
from django.utils.text import get_text_list

from durabl import FAILURE_KINDS, TERMINAL_STATUSES, Job, served_by_index
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
    JobFilters,
    JobListing,
    attempts_text,
    first_line,
    get_job_queue,
    has_perm,
    kind_label,
    require,
)
from durabl_django.views.common import (
    CLIP,
    NOWRAP,
    SECTION_MODELS,
    TITLES,
    WIDE,
    Cell,
    Choice,
    admin_url,
    base_context,
    due_time_text,
    finished_at,
    has_job_field,
    job_value,
    render,
    time_cell,
    waiting_since,
    with_query,
)

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    from durabl import JobQueue

TYPE = "durabl-type"  # a job type: never broken at its hyphens, cut with "…" past its width


@dataclass(frozen=True)
class Column:
    """A list column: its heading and the ``list_jobs`` order it sorts by, if any."""

    label: str
    order: str | None = None
    css: str = ""


def _columns(status: str, waiting: bool = False) -> list[Column]:
    key = Column("Dedupe key", css=CLIP)
    type_ = Column("Type", "type", TYPE)
    attempts = Column("Attempts", "attempts", NOWRAP)
    created = Column("Created", "created_at", NOWRAP)
    if status == "failed":
        # The reason under the type: together they take what the other columns leave.
        return [
            Column("Type and reason", "type", WIDE),
            Column("Failure kind", css=NOWRAP),
            attempts,
            Column("Failed", "finished_at", NOWRAP),
            key,
        ]
    if waiting:  # what each waits for instead of its due time (a signal's: never)
        waits = [Column("Waiting for", css=CLIP), Column("Waiting since", css=NOWRAP)]
        return [type_, *waits, attempts, created, key]
    if status == "pending":
        return [
            type_,
            Column("Priority", "priority", NOWRAP),
            Column("Run at", "run_at", NOWRAP),
            attempts,
            created,
            key,
        ]
    if status == "active":
        worker = [Column("Worker", css=CLIP)] if has_job_field("worker") else []
        return [
            type_,
            *worker,
            attempts,
            Column("Last update", "updated_at", NOWRAP),
            created,
            key,
        ]
    return [type_, attempts, Column("Finished", "finished_at", NOWRAP), created, key]


def _cells(job: Job[Any], empty: str, waiting: bool = False) -> list[Cell]:
    # The columns of long values (type, dedupe key, what a job waits for, its worker) give
    # way to each other when a row holds more than the page has room for, so a long key
    # never widens the page; the failed list's reason takes that room instead, its key
    # keeps its width.
    cut = job.status != "failed"
    key = Cell(job.dedupe_key or empty, title=job.dedupe_key or "", css=CLIP, cut=cut)
    type_ = Cell(job.type, title=job.type, css=TYPE, cut=True)
    attempts = Cell(attempts_text(job), css=NOWRAP)
    created = time_cell(job.created_at, empty)
    if waiting:
        waits = job.waiting_for or empty
        since = time_cell(waiting_since(job), empty)
        waits_cell = Cell(waits, title=waits, css=CLIP, cut=True)
        return [type_, waits_cell, since, attempts, created, key]
    if job.status == "failed":
        reason = job.fail_reason or ""
        return [
            Cell(
                job.type,
                title=job.type,
                css=f"{WIDE} {TYPE}",
                sub=first_line(reason, 200) or empty,
                sub_title=first_line(reason, 1000),
            ),
            Cell(kind_label(job.failure_kind) or empty, css=NOWRAP),
            attempts,
            time_cell(finished_at(job), empty),
            key,
        ]
    if job.status == "pending":
        return [
            type_,
            Cell(str(job.priority), css=NOWRAP),
            Cell(signalled, css=NOWRAP)
            if (signalled := due_time_text(job.run_at))
            else time_cell(
                job.run_at, empty, note="" if job.run_at <= timezone.now() else "(delayed)"
            ),
            attempts,
            created,
            key,
        ]
    workers = []  # active: who runs it; finished: nothing
    if job.status == "active" and has_job_field("worker"):
        worker = job_value(job, "worker")
        workers = [Cell(worker or empty, title=worker or "", css=CLIP, cut=True)]
    last = job.updated_at if job.status == "active" else finished_at(job)
    return [type_, *workers, attempts, time_cell(last, empty), created, key]


def _headers(filters: JobFilters, sortable: Callable[[str], bool]) -> list[dict[str, Any]]:
    """Each column's heading; a sortable one links to its order, ascending first, and
    a sorted one to the other direction (none links where the list is too long to sort
    by that column)."""
    headers = []
    for column in _columns(filters.status, filters.waiting):
        header: dict[str, Any] = {
            "label": column.label,
            "url": "",
            "sorted": "",
            "css": column.css,
        }
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
    """The filters: each a title, its choices, and the one selected (shown when closed)."""
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
    if filters.status == "pending":
        waits = filters.waiting
        specs.append(
            {
                "title": "waiting",
                "choices": [
                    Choice("All", filters.querystring(waiting=False), not waits),
                    Choice(
                        "Waiting (sleep, signal, children)",
                        filters.querystring(waiting=True),
                        waits,
                    ),
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
    for spec in specs:
        spec["current"] = next(c.display for c in spec["choices"] if c.selected)
        spec["filtered"] = not spec["choices"][0].selected
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


def _list_actions(request: HttpRequest, status: str) -> list[tuple[str, str]]:
    """The action menu's choices: each action this list offers that the user may run."""
    actions: list[tuple[str, str]] = []
    if status == "failed" and has_perm(request, RETRY_PERMISSION):
        actions.append(("retry_selected", "Retry selected failed jobs"))
    if status != "active" and has_perm(request, DELETE_PERMISSION):
        actions.append(("delete_selected", f"Delete selected {status} jobs"))
    if status in ("pending", "active") and has_perm(request, CANCEL_PERMISSION):
        actions.append(("cancel_selected", f"Cancel selected {status} jobs"))
    if status == "pending" and has_perm(request, RETRY_PERMISSION):
        actions.append(("run_now_selected", "Run selected delayed jobs now"))
    return actions


def job_list(model_admin: ModelAdmin[Any], request: HttpRequest, status: str) -> HttpResponse:
    """A changelist-like page of the jobs with ``status``: filters, search, pagination;
    for failed jobs, row checkboxes and the retry/delete actions the user may run."""
    require(request)
    queue = get_job_queue()
    filters = JobFilters.from_query(status, request.GET)
    listing = JobListing(queue, filters)
    total = listing.total()
    short = total <= SORT_LIMIT

    orders = {c.order: c.label for c in _columns(status, filters.waiting) if c.order}

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
    rows = []
    for job in page.object_list:
        url = admin_url(f"{section}_detail", job.id)
        rows.append({"id": job.id, "url": url, "cells": _cells(job, empty, filters.waiting)})
    actions = _list_actions(request, status)
    retry_all_url = ""
    if status == "failed" and has_perm(request, RETRY_PERMISSION) and paginator.count:
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
            filters, type=None, failure_kind=None, search=None, parent=None, waiting=False
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
