"""Rules every store applies the same way: pure functions over a job's fields, no I/O.

A store keeps what must be atomic in its own database; what a transition *means* is
decided here, once, so the stores cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal

from durabl.model.clock import as_utc, to_seconds
from durabl.model.job import (
    CANCELLED,
    FAILURE_KINDS,
    STATUSES,
    TERMINAL_STATUSES,
    HeartbeatResult,
    JobFilter,
    JobResult,
    ResultStatus,
)
from durabl.model.options import NewJob
from durabl.model.reports import QueueStats, ReapReport

JOB_FILTER_FIELDS = tuple(f.name for f in fields(JobFilter))
"""The keywords ``list_jobs`` and ``count_jobs`` select by."""

STALLED_REASON = "lease expired: the worker stopped heartbeating (crashed or hung)"
"""The ``fail_reason`` of a job the reaper gave up on (failure kind ``stalled``)."""

UNSTARTED_REAP_LIMIT = 3
"""How many times a job may be reaped unstarted without using an attempt.

A job claimed ahead of a free worker (read ahead) is *reserved*: its worker records the
start in its next write, and the reaper refunds the attempt of a reserved job whose start
was never recorded, since its handler most likely never ran. The start is recorded
asynchronously (a synchronous write before every read-ahead run would cost a round trip per
job), so a job that kills its process within milliseconds of starting could go unrecorded
each time; past this many refunds the reaper charges it like any other lost run, and such
a poison job still ends ``stalled``."""


def cancelled_reason(requested: str | None) -> str:
    """The ``fail_reason`` (and the attempt's error) of a run that ends ``cancelled`` on
    request: the reason the request kept, else ``cancelled``."""
    return requested or CANCELLED


def enqueues_before_inline_run(job: NewJob) -> bool:
    """Whether ``claim_or_enqueue`` must store ``job`` as pending first and then claim it
    (in one transaction where the store has them): its pending slot decides whether a
    follower already covers the work (dedupe scope ``pending``), or its concurrency key
    whether it may start now. Otherwise the job is created already claimed."""
    return job.concurrency_key is not None or (
        job.dedupe_key is not None and job.dedupe_scope == "pending"
    )


def created_claimed(token: str, now: Any, lease_owner: str) -> dict[str, Any]:
    """The fields that make a job being created already claimed (``claim_or_enqueue``'s
    inline run): active, its first attempt counted, held by ``token`` since ``now`` (in
    the store's own representation of an instant)."""
    return {
        "status": "active",
        "attempts": 1,
        "claim_token": token,
        "claimed_at": now,
        "heartbeat_at": now,
        "lease_owner": lease_owner,
    }


ReapDecision = Literal["cancel", "refund", "recover", "stall"]


def reap_decision(
    attempts: int,
    max_attempts: int,
    *,
    reserved: bool,
    unstarted_reaps: int,
    cancel_requested: bool,
) -> ReapDecision:
    """What the reaper does with an active job whose lease expired, in this order:

    ``cancel``: ended ``cancelled`` (its :func:`cancelled_reason`), whatever attempts
    remain, when a cancellation was requested: its worker is gone, so the run did stop,
    as asked; ``refund``: back to pending with its attempt given back (a read-ahead claim
    whose handler never started); ``stall``: failed ``stalled``, no attempt left;
    ``recover``: back to pending, the lost run counted. (A store that cannot move the job
    back to pending because a follower holds its pending slot supersedes it instead.)"""
    if cancel_requested:
        return "cancel"
    if reserved and unstarted_reaps < UNSTARTED_REAP_LIMIT:
        return "refund"
    if attempts >= max_attempts:
        return "stall"
    return "recover"


# -- operator queries -------------------------------------------------------------------------
def check_filters(status: str | None, failure_kind: str | None) -> None:
    """Raise ``ValueError`` unless ``status`` and ``failure_kind`` (each optional) name a
    known status and failure kind: the check ``list_jobs`` and ``count_jobs`` make on every
    store before they read anything."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    if failure_kind is not None and failure_kind not in FAILURE_KINDS:
        raise ValueError(f"failure_kind must be one of {FAILURE_KINDS}, got {failure_kind!r}")


def job_filter(filters: Mapping[str, Any]) -> JobFilter:
    """The selection ``list_jobs``/``count_jobs`` keywords make, checked: ``TypeError`` for
    a keyword that is no filter, ``ValueError`` for an unknown status or failure kind."""
    unknown = sorted(set(filters) - set(JOB_FILTER_FIELDS))
    if unknown:
        raise TypeError(f"unknown job filters {unknown}: use {', '.join(JOB_FILTER_FIELDS)}")
    selection = JobFilter(**filters)
    check_filters(selection.status, selection.failure_kind)
    if selection.parent_id is not None and not isinstance(selection.parent_id, str):
        raise TypeError(f"parent_id must be a job id (str), got {selection.parent_id!r}")
    if selection.waiting is not None and not isinstance(selection.waiting, bool):
        raise TypeError(f"waiting must be True or False, got {selection.waiting!r}")
    for name, _, _, value in selection.ranges():
        if not isinstance(value, datetime):
            raise TypeError(f"{name} must be a datetime, got {value!r}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware, got {value!r}")
    return selection


JOB_ORDER_FIELDS = (
    "created_at",
    "updated_at",
    "finished_at",
    "run_at",
    "type",
    "priority",
    "attempts",
)
"""The fields ``list_jobs(order=...)`` sorts by (``"-"`` first: descending). A job that
has not finished sorts by ``finished_at`` below every finish time (first ascending, last
descending), on every store."""


def lists_by_finish(selection: JobFilter) -> bool:
    """The order of a list without ``order=``, on every store: a list of one status is
    newest finish first, then newest first (so jobs not finished, whose finish time is
    unset, are simply newest first); a list of every status is newest first. Each is the
    order of an index (``(status, finished_at)``, the jobs' own key) read from its end,
    whatever the database knows of how many jobs each status holds."""
    return selection.status is not None


#: The sorts every store serves from an index for a list of one status, so they page as
#: fast at a million jobs as the list's own order: finish time for the finished lists
#: (the index their own order reads), due time for the pending list (the operator's
#: "what runs next, what is overdue"). Other sorts read every job of the list. Creation
#: time is left out on purpose: its index costs every enqueue and every claim about 3 %
#: (bench/README.md, "What a sort's index costs").
INDEXED_ORDERS: Mapping[str, frozenset[str]] = {
    "pending": frozenset({"run_at"}),
    **{status: frozenset({"finished_at"}) for status in TERMINAL_STATUSES},
}


def served_by_index(status: str | None, field: str) -> bool:
    """Whether a list of ``status`` sorted by ``field`` is read from an index on every
    store (:data:`INDEXED_ORDERS`): a page of it costs the same at any length."""
    return status is not None and field in INDEXED_ORDERS.get(status, frozenset())


@dataclass(frozen=True)
class JobOrder:
    """A checked ``list_jobs`` sort: ``field`` (one of :data:`JOB_ORDER_FIELDS`), then, for
    equal values, newest job first. Strings compare by code point on every store."""

    field: str
    descending: bool = False


@dataclass(frozen=True)
class JobPage:
    """Which of the selected jobs a store's ``find_jobs`` returns: ``offset`` skipped, at
    most ``limit`` (0: no limit), in ``order`` (None: the list's own order); ``newest``:
    only among that many jobs, the first of the list in its own order (before its search
    and its sort), a walk that stops there: a broad search's page found without the index
    probes, or a long list's newest jobs sorted by a field no index serves
    (``list_jobs(among_newest=)``)."""

    limit: int
    offset: int = 0
    order: JobOrder | None = None
    newest: int | None = None


def job_order(order: str | None) -> JobOrder | None:
    """The sort ``order`` names (``"run_at"``, ``"-created_at"``...), checked once for every
    store: ``ValueError`` for anything but a sortable field; None for the default order."""
    if order is None:
        return None
    if not isinstance(order, str):
        raise TypeError(f"order must be a string such as '-created_at', got {order!r}")
    name = order[1:] if order.startswith("-") else order
    if name not in JOB_ORDER_FIELDS:
        sortable = ", ".join(JOB_ORDER_FIELDS)
        raise ValueError(
            f"order must be one of {sortable} (with '-' for descending), got {order!r}"
        )
    return JobOrder(name, order.startswith("-"))


def check_page(limit: int, offset: int) -> None:
    """Raise ``ValueError`` unless ``limit`` (0: no limit) and ``offset`` are whole numbers
    of at least 0: the paging check ``list_jobs`` makes on every store."""
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")


#: How many jobs of a list, newest first, a search looks through before it probes the
#: indexes instead: at least the first, at most the second, else twenty per match it wants
#: (a page's last row, or the count's cap). A search that matches many jobs (one character
#: of an id, text every failure has) finds its page, or enough matches to stop counting,
#: among the newest jobs of the list in a few milliseconds, where the index probes would
#: gather every match first; one that matches few jobs finds too few there and takes the
#: probes, which then have little to gather. At a million jobs on SQLite a walk of 2,000
#: jobs takes 1-2 ms, one of 20,000 10-25 ms.
SEARCH_WALK = (2_000, 20_000)


def search_walk(wanted: int) -> int:
    """How many of the newest jobs of a list to look through for ``wanted`` matches."""
    least, most = SEARCH_WALK
    return min(most, max(least, 20 * wanted))


def check_at_most(at_most: int | None, name: str = "at_most") -> None:
    """Raise ``ValueError`` unless ``at_most`` (``count_jobs``'s cap, or the ``name``d one:
    ``among_newest``) is None or a whole number of at least 1."""
    if at_most is None:
        return
    if isinstance(at_most, bool) or not isinstance(at_most, int) or at_most < 1:
        raise ValueError(f"{name} must be a whole number >= 1 or None, got {at_most!r}")


def stats_from_counts(
    counts: Mapping[Any, int],
    failed_by_kind: Mapping[Any, int],
    oldest_due: datetime | None,
    now: datetime,
) -> QueueStats:
    """The :class:`QueueStats` a store reports from what it counted: jobs per status,
    failed jobs per failure kind (unknown kinds and zero counts are left out, the rest kept
    in :data:`FAILURE_KINDS` order) and the ``run_at`` of the oldest due pending job."""
    oldest = as_utc(oldest_due) if oldest_due is not None else None
    lag = max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0
    return QueueStats(
        pending=counts.get("pending", 0),
        active=counts.get("active", 0),
        completed=counts.get("completed", 0),
        failed=counts.get("failed", 0),
        superseded=counts.get("superseded", 0),
        cancelled=counts.get("cancelled", 0),
        oldest_pending_run_at=oldest,
        oldest_pending_lag=lag,
        failed_by_kind={kind: n for kind in FAILURE_KINDS if (n := failed_by_kind.get(kind, 0))},
    )


# -- retention --------------------------------------------------------------------------------
#: What ``prune()`` deletes unless told otherwise: jobs that ended well (failed jobs are kept
#: for people to look at, unless named).
PRUNE_STATUSES: tuple[str, ...] = ("completed", "superseded", "cancelled")


def prune_selection(older_than: Any, statuses: Any) -> tuple[float, tuple[str, ...]]:
    """``prune()``'s arguments checked: the age in seconds (positive) and the terminal
    statuses named (at least one; ``pending`` and ``active`` jobs are never pruned)."""
    age = to_seconds(older_than, "older_than")
    if not age > 0:
        raise ValueError(f"older_than must be a positive duration, got {older_than!r}")
    if isinstance(statuses, str) or not isinstance(statuses, Iterable):
        raise TypeError(f"statuses must be a sequence of statuses, got {statuses!r}")
    chosen = tuple(dict.fromkeys(statuses))
    unknown = [s for s in chosen if s not in TERMINAL_STATUSES]
    if unknown or not chosen:
        raise ValueError(
            f"statuses must name terminal statuses ({', '.join(TERMINAL_STATUSES)}), "
            f"got {list(statuses)!r}"
        )
    return age, chosen


# -- fenced writes ----------------------------------------------------------------------------
def resolve_miss(status: str | None, receipt: ResultStatus | None) -> JobResult:
    """Why a fenced write matched nothing, from what the store holds for the job: its
    ``status`` (None: no such job) and the ``receipt`` of this (claim token, operation), if
    one is kept. A repeat of a write that applied reports its first result; else the job
    ended (``already-terminal``) or another claim holds it (``lease-lost``)."""
    if status is None:
        return JobResult("not-found")
    if receipt is not None:
        return JobResult(receipt)
    if status in TERMINAL_STATUSES:
        return JobResult("already-terminal", status)
    return JobResult("lease-lost")


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code point
    order (which is also the byte order of UTF-8): the prefix with its last character
    stepped up one. A search for keys that start with ``prefix`` is then the index range
    ``prefix <= key < bound``. None when no string is above them all (``prefix`` is empty
    or all U+10FFFF)."""
    chars = list(prefix)
    while chars:
        step = ord(chars.pop()) + 1
        if step <= 0x10FFFF:
            if 0xD800 <= step <= 0xDFFF:  # not a character: the next one is
                step = 0xE000
            return "".join(chars) + chr(step)
    return None


# -- decisions each store's writes act on -------------------------------------------------
def coalesces(job: NewJob) -> bool:
    """Whether an enqueue that found its dedupe slot taken replaces the payload of the
    pending job holding it (``coalesce="latest"``; never an active job's)."""
    return job.coalesce == "latest" and job.dedupe_key is not None


@dataclass(frozen=True)
class HolderUpdate:
    """What an enqueue that found its pending slot taken changes in the pending job of
    the same type holding it (never an active job), as one atomic update:

    - ``replace_data``: its payload becomes the enqueue's (``coalesce="latest"``);
    - ``push_to``: its ``run_at`` is pushed to this instant (the enqueue's now +
      ``debounce``), bounded by ``within``: never later than the job's ``created_at``
      (the burst's first enqueue) + ``within`` seconds (``debounce_max``; None:
      unbounded), and never earlier than it already is. The store applies
      :func:`debounced_run_at` to the row it updates, in the same statement.

    ``updated_at`` becomes the store's now whenever the holder is updated."""

    replace_data: bool
    push_to: datetime | None
    within: float | None

    @property
    def within_ms(self) -> int | None:
        """``within`` in whole milliseconds (the stores keep instants to the millisecond)."""
        return None if self.within is None else round(self.within * 1000)


def holder_update(job: NewJob) -> HolderUpdate | None:
    """The update an enqueue of ``job`` applies to the pending job holding its dedupe slot
    when the slot is taken; None when it changes nothing there (it is simply refused)."""
    if job.dedupe_key is None:
        return None
    push_to = job.run_at if job.debounce is not None else None
    if not coalesces(job) and push_to is None:
        return None
    return HolderUpdate(coalesces(job), push_to, job.debounce_max if push_to else None)


def debounced_run_at(update: HolderUpdate, run_at: datetime, created_at: datetime) -> datetime:
    """The ``run_at`` of a pending job (due at ``run_at``, first enqueued at
    ``created_at``) after ``update``: the pushed instant, bounded by ``within`` seconds past
    the first enqueue, and never earlier than ``run_at``: a push only delays, so of two
    racing enqueues the later instant wins whichever writes last, and a job already past
    its bound (or waiting out a retry's backoff) keeps its time. The SQL and MongoDB
    stores write this same expression into their update."""
    if update.push_to is None:
        return run_at
    pushed = update.push_to
    if update.within_ms is not None:
        pushed = min(pushed, created_at + timedelta(milliseconds=update.within_ms))
    return max(run_at, pushed)


def heartbeat_answer(held: bool, cancel_requested: bool) -> HeartbeatResult:
    """What a heartbeat answers: ``lease-lost`` when its claim is no longer held, else
    ``cancel-requested`` once a cancellation was requested, else ``applied``."""
    if not held:
        return "lease-lost"
    return "cancel-requested" if cancel_requested else "applied"


def journal_holds_append(length: int, position: int, count: int) -> bool:
    """Whether a journal of ``length`` entries already holds an append of ``count``
    records at ``position`` (only the claim holder appends, so entries past ``position``
    are that append, repeated after a lost reply)."""
    return length >= position + count


FailureEnd = Literal["cancel", "fail", "retry"]


def failure_end(
    *, retrying: bool, attempts: int, max_attempts: int, cancel_requested: bool
) -> FailureEnd:
    """How a failed run ends: ``cancel`` when a cancellation was requested (it is not put
    back to pending); ``retry`` (back to pending at the failure's retry time) when the
    failure allows a retry and attempts remain; else ``fail`` (terminal). A store that
    cannot move the job back to pending because a follower holds its pending slot
    supersedes it instead."""
    if cancel_requested:
        return "cancel"
    if retrying and attempts < max_attempts:
        return "retry"
    return "fail"


ReapOutcome = Literal["recovered", "stalled", "superseded"]


def reap_outcome(decision: ReapDecision, superseded: bool) -> ReapOutcome:
    """What the reaper counts for a job it acted on as ``decision`` said: a cancelled job
    counts as recovered (its run did stop); a move back to pending that found a follower
    holding the pending slot counts as superseded."""
    if decision == "stall":
        return "stalled"
    if superseded:
        return "superseded"
    return "recovered"


class ReapTally:
    """The counts of one reaper sweep, added job by job, and its report."""

    def __init__(self) -> None:
        self.counts = {"recovered": 0, "stalled": 0, "superseded": 0}
        self.job_ids: list[str] = []

    def add(self, job_id: str, outcome: ReapOutcome | None) -> None:
        """Count ``job_id``'s outcome (None: another process moved it first; not counted)."""
        if outcome is not None:
            self.counts[outcome] += 1
            self.job_ids.append(job_id)

    def report(self, saturated: bool) -> ReapReport:
        return ReapReport(
            self.counts["recovered"],
            self.counts["stalled"],
            self.counts["superseded"],
            saturated,
            tuple(self.job_ids),
        )
