"""Plumbing shared by the admin pages: permissions, list filters, a paginated job
listing over the queue, and plain-text formatting of what a job carries.

Everything here produces plain strings; templates escape them. Nothing here marks job
data safe.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, overload
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

import durabl_django
from durabl import FAILURE_KINDS, JOB_ORDER_FIELDS, STATUSES, FailureKind, Job

if TYPE_CHECKING:
    from durabl import JobQueue

VIEW_PERMISSION = "durabl_django.view_job"
RETRY_PERMISSION = "durabl_django.retry_job"
DELETE_PERMISSION = "durabl_django.delete_job"
CANCEL_PERMISSION = "durabl_django.cancel_job"

PAGE_SIZE = 50
ACTION_BATCH = 500  # jobs fetched per query when acting on everything that matches
SELECTED = "_selected_action"  # Django's own name, so admin/js/actions.js works as is
TYPE_VAR, KIND_VAR, SEARCH_VAR, PAGE_VAR, ORDER_VAR = "type", "kind", "q", "p", "o"
STATUS_VAR = "status"
#: The list's filter of the children of one job (its id).
PARENT_VAR = "parent"
#: The pending list's filter of the jobs suspended in an orchestration's wait (``1``).
WAITING_VAR = "waiting"
#: The ``list_jobs`` orders the lists' column headings sort by.
SORTABLE = JOB_ORDER_FIELDS
#: The most jobs a list sorts by a column no index serves (such a sort reads every job it
#: sorts: this many take about 100 ms on SQLite). A longer list sorted so sorts its first
#: this many jobs in its own order (``list_jobs(among_newest=)``: the newest, or those
#: that finished last) and says so.
SORT_LIMIT = 50_000
#: The most matches a search counts: past it the list says "1,000+" and pages through the
#: first 1,000 (newest first). Counting every match of a broad search (one character of
#: an id, text every failure has) would read them all: a quarter of a second at a million
#: jobs, where finding 1,000 among the newest jobs takes milliseconds.
SEARCH_COUNT_LIMIT = 1_000
DATE_VAR = "d"
#: The date filter's choices: how far back a list reaches (by finish time on the lists of
#: finished jobs, by creation time on the pending and active lists).
DATE_RANGES: Mapping[str, tuple[str, timedelta]] = {
    "1h": ("Past hour", timedelta(hours=1)),
    "24h": ("Past 24 hours", timedelta(days=1)),
    "7d": ("Past 7 days", timedelta(days=7)),
    "30d": ("Past 30 days", timedelta(days=30)),
}

#: Every status with a list, in the order the admin shows them: ``cancelled`` once the
#: store knows it.
LISTED_STATUSES: tuple[str, ...] = tuple(
    s
    for s in ("pending", "active", "completed", "failed", "superseded", "cancelled")
    if s in STATUSES
)
KIND_LABELS: Mapping[str, str] = {
    "retries-exhausted": "Retries exhausted",
    "fatal": "Fatal",
    "stalled": "Stalled",
    "interrupted": "Interrupted",
    "invalid-payload": "Invalid payload",
    "timed-out": "Timed out",
}
_MAX_FILTER_LENGTH = 200
_MAX_PAYLOAD_CHARS = 200_000


def get_job_queue() -> JobQueue:
    """The queue configured from ``settings.DURABL``."""
    return durabl_django.get_queue()


def has_perm(request: HttpRequest, perm: str) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff and user.has_perm(perm))


def require(request: HttpRequest, *perms: str) -> None:
    """Raise PermissionDenied (403) unless the staff user holds every permission."""
    for perm in (VIEW_PERMISSION, *perms):
        if not has_perm(request, perm):
            raise PermissionDenied


@dataclass(frozen=True)
class JobFilters:
    """What a job list shows: a status plus the filters a user picked, read from the
    list's query string by :meth:`from_query` and written back by :meth:`params`."""

    status: str
    type: str | None = None
    failure_kind: FailureKind | None = None
    search: str | None = None
    page: int = 1
    #: A ``list_jobs`` order (``"-created_at"``...), None for the store's default.
    order: str | None = None
    #: A key of :data:`DATE_RANGES`, or None for any date.
    since: str | None = None
    #: Only the children of this job (its id).
    parent: str | None = None
    #: Only the jobs suspended in a wait (a sleep, a signal, children): pending lists only.
    waiting: bool = False

    @classmethod
    def from_query(cls, status: str, query: Mapping[str, Any]) -> JobFilters:
        """Read ``type``, ``kind``, ``q``, ``o`` and ``p``; anything unusable is ignored."""

        def text(name: str) -> str | None:
            value = query.get(name)
            if not isinstance(value, str):
                return None
            value = value.strip()
            return value[:_MAX_FILTER_LENGTH] or None

        kind = text(KIND_VAR)
        failure_kind: FailureKind | None = None
        if status == "failed":
            for known in FAILURE_KINDS:
                if kind == known:
                    failure_kind = known
        try:
            page = max(1, int(text(PAGE_VAR) or 1))
        except ValueError:
            page = 1
        order = text(ORDER_VAR)
        if order is not None and order.removeprefix("-") not in SORTABLE:
            order = None
        since = text(DATE_VAR)
        if since not in DATE_RANGES:
            since = None
        return cls(
            status,
            page=page,
            order=order,
            type=text(TYPE_VAR),
            failure_kind=failure_kind,
            search=text(SEARCH_VAR),
            since=since,
            parent=text(PARENT_VAR),
            waiting=status == "pending" and text(WAITING_VAR) == "1",
        )

    @property
    def date_field(self) -> str:
        """The time the date filter bounds on this list: ``created``, or ``finished`` on the
        lists of finished jobs (an index of every store serves it)."""
        return "created" if self.status in ("pending", "active") else "finished"

    def queue_filters(self) -> dict[str, Any]:
        """Keyword arguments for ``list_jobs`` / ``count_jobs``."""
        filters: dict[str, Any] = {
            "status": self.status,
            "type": self.type,
            "failure_kind": self.failure_kind,
            "search": self.search,
        }
        if self.parent is not None:
            filters["parent_id"] = self.parent
        if self.waiting:
            filters["waiting"] = True
        if self.since is not None:
            after = datetime.now(timezone.utc) - DATE_RANGES[self.since][1]
            filters[f"{self.date_field}_after"] = after
        return filters

    def params(self, *, with_page: bool = True) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.type:
            params[TYPE_VAR] = self.type
        if self.failure_kind:
            params[KIND_VAR] = self.failure_kind
        if self.search:
            params[SEARCH_VAR] = self.search
        if self.since:
            params[DATE_VAR] = self.since
        if self.parent:
            params[PARENT_VAR] = self.parent
        if self.waiting:
            params[WAITING_VAR] = "1"
        if self.order:
            params[ORDER_VAR] = self.order
        if with_page and self.page > 1:
            params[PAGE_VAR] = str(self.page)
        return params

    def querystring(self, **changes: Any) -> str:
        """``?...`` for these filters with ``changes`` applied; changing a filter goes back
        to page 1. Plain ``?`` when nothing is set."""
        target = self
        if changes:
            changes.setdefault("page", 1)
            target = replace(self, **changes)
        return "?" + urlencode(target.params())

    def url(self, base: str) -> str:
        """``base`` with these filters (and page) as its query string, if any."""
        params = self.params()
        return f"{base}?{urlencode(params)}" if params else base

    @property
    def is_filtered(self) -> bool:
        chosen = (self.type, self.failure_kind, self.search, self.since, self.parent)
        return any(chosen) or self.waiting

    def describe(self) -> str:
        """What the filters select, to follow "jobs", e.g. ``of type "email", with failure
        kind "Fatal", whose id, dedupe key or failure reason matches "bulk:"``."""
        parts = []
        if self.waiting:
            parts.append("waiting in an orchestration")
        if self.parent:
            parts.append(f'started by job "{self.parent}"')
        if self.type:
            parts.append(f'of type "{self.type}"')
        if self.failure_kind:
            parts.append(f'with failure kind "{kind_label(self.failure_kind)}"')
        if self.search:
            parts.append(f'whose id, dedupe key or failure reason matches "{self.search}"')
        if self.since:
            when = "created" if self.date_field == "created" else "finished"
            parts.append(f"{when} in the {DATE_RANGES[self.since][0].lower()}")
        if len(parts) > 1:
            return ", ".join(parts[:-1]) + " and " + parts[-1]
        return "".join(parts)


class JobListing:
    """A lazy, sliceable view of the jobs matching some filters, for Django's Paginator:
    ``count()`` asks ``count_jobs`` once; a slice is one ``list_jobs(limit, offset)``."""

    def __init__(
        self,
        queue: JobQueue,
        filters: JobFilters,
        count: int | None = None,
        capped: bool = False,
        among_newest: int | None = None,
    ) -> None:
        self.queue = queue
        self.filters = filters
        self._count = count  # known already: the same filters, another order
        #: Whether a search matched more than SEARCH_COUNT_LIMIT jobs: ``count()`` is then
        #: that limit, and the listing reaches only that many.
        self.capped = capped
        #: Only the first this many jobs of the list in its own order are listed (and
        #: sorted): ``count()`` is at most that, ``total()`` every job of the filters.
        self.among_newest = among_newest
        self._first_page: list[Job[Any]] | None = None

    def count(self) -> int:
        """How many jobs the listing reaches (the paginator's count)."""
        total = self.total()
        return total if self.among_newest is None else min(total, self.among_newest)

    def total(self) -> int:
        """How many jobs the filters select (a capped search: SEARCH_COUNT_LIMIT)."""
        if self._count is None:
            if self.filters.search:
                self._count = self._count_search()
            else:
                self._count = self.queue.count_jobs(**self.filters.queue_filters())
        return self._count

    def _count_search(self) -> int:
        # The first page first: a search that does not fill it has been counted by it
        # (a narrow search then costs its index probes once, not twice), and the page
        # is kept for the slice that asks for it.
        first = self.fetch(0, PAGE_SIZE)
        if len(first) < PAGE_SIZE:
            self._first_page = first
            return len(first)
        found = self.queue.count_jobs(
            **self.filters.queue_filters(), at_most=SEARCH_COUNT_LIMIT + 1
        )
        self.capped = found > SEARCH_COUNT_LIMIT
        self._first_page = first
        return min(found, SEARCH_COUNT_LIMIT)

    def count_label(self) -> str:
        """The count of the filters' jobs as a page shows it (what "select all" and "retry
        all matching" act on): ``1,000+`` when the search matched more."""
        return f"{self.total():,}+" if self.capped else str(self.total())

    def __len__(self) -> int:
        return self.count()

    @overload
    def __getitem__(self, index: int) -> Job[Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[Job[Any]]: ...
    def __getitem__(self, index: int | slice) -> Job[Any] | list[Job[Any]]:
        if isinstance(index, int):
            jobs = self.fetch(index, 1)
            if not jobs:
                raise IndexError(index)
            return jobs[0]
        start, stop, step = index.indices(self.count())
        if step != 1:
            raise ValueError("JobListing slices must be contiguous")
        return self.fetch(start, stop - start) if stop > start else []

    def fetch(self, offset: int, limit: int) -> list[Job[Any]]:
        first = self._first_page
        if first is not None and offset == 0 and limit <= PAGE_SIZE:
            return first[:limit]
        return self.queue.list_jobs(
            **self.filters.queue_filters(),
            limit=limit,
            offset=offset,
            order=self.filters.order,
            among_newest=self.among_newest,
        )

    def __iter__(self) -> Iterator[Job[Any]]:
        """Every matching job, ``ACTION_BATCH`` per query."""
        offset = 0
        while True:
            jobs = self.fetch(offset, ACTION_BATCH)
            yield from jobs
            if len(jobs) < ACTION_BATCH:
                return
            offset += ACTION_BATCH

    def ids(self) -> list[str]:
        """Every matching id, each once (a job that moves between two batches could
        otherwise show up twice). Taken in full before anything acts on the jobs: acting
        moves them out of these filters and would shift the offsets."""
        return list(dict.fromkeys(job.id for job in self))


# -- formatting: everything returns plain text for the templates to escape ------------------


def first_line(text: str | None, width: int = 120) -> str:
    """The first non-blank line of ``text``, cut to ``width`` characters."""
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line:
            return line if len(line) <= width else line[: width - 1] + "\u2026"
    return ""


def _json_default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds()} s"
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        shown = raw[:64].hex()
        more = "\u2026" if len(raw) > 64 else ""
        return f"<{len(raw)} bytes: {shown}{more}>"
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return str(value)


def format_payload(data: object, max_chars: int = _MAX_PAYLOAD_CHARS) -> str:
    """Pretty-printed JSON; values JSON cannot hold (bytes, datetimes, ObjectIds...) are
    shown as text. Past ``max_chars`` it is cut with a note."""
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError, RecursionError):
        text = repr(data)
    if len(text) > max_chars:
        cut = len(text) - max_chars
        text = f"{text[:max_chars]}\n\u2026 ({cut} more characters not shown)"
    return text


def humanize_seconds(seconds: float) -> str:
    """``42 s``, ``4 min 12 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if not math.isfinite(seconds):
        return "\u2014"
    whole = int(seconds)
    if whole < 60:
        return "< 1 s" if seconds < 1 else f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def attempts_text(job: Job[Any]) -> str:
    return f"{job.attempts}/{job.max_attempts}"


def kind_label(kind: str | None) -> str:
    return KIND_LABELS.get(kind or "", kind or "")
