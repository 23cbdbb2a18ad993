"""The ``waiting`` filter of ``list_jobs`` and ``count_jobs``, decided once above every
store: a job waits when it is pending, not due yet, and suspended in its body's wait
(:attr:`Job.waiting_for` is set: a sleep, a signal wait, a gather).

``waiting_for`` is read from the journal's last entry and the due time
(:func:`durabl.model.waiting.suspension_of`), which no store can test in its own query
language the same way. So a store selects the candidates in one query of its indexes — the
pending jobs that carry a journal (:attr:`JobFilter.waiting` True; the status set to
``pending`` here) — and this module keeps those that wait. The answer is exact, but a
count reads every candidate: a retried orchestration waiting out its backoff carries a
journal and a later due time, yet waits for nothing of its body's, and is read to be left
out. Candidates are read a chunk at a time (from :data:`CANDIDATES_PER_READ`, or a page's
own end, doubling up to :data:`MOST_PER_READ`), so a page stops reading once it is full,
and a long count skips the rows of earlier chunks a few times, not once per chunk.

``waiting=False`` selects every other job: a list walks the list and leaves the waiting
ones out; a count is the list's count less the waiting ones'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from itertools import islice
from typing import Any

from durabl.model.job import Job, JobFilter
from durabl.model.rules import JobOrder, JobPage

#: How many candidates the first read of a store returns (a page asks for its own end if
#: more), and the most one read returns.
CANDIDATES_PER_READ = 500
MOST_PER_READ = 8_000

Find = Callable[[JobFilter, JobPage], list[Job[Any]]]
"""A store's ``find_jobs``."""
Count = Callable[[JobFilter, int | None], int]
"""A store's count of a selection, at most that many (None: all)."""


def is_waiting(job: Job[Any], now: datetime) -> bool:
    """Whether ``job`` is suspended in its body's wait and not due at ``now``."""
    return job.waiting_for is not None and job.run_at > now


def check_not_bulk(selection: JobFilter, operation: str) -> None:
    """The bulk operations write in one store operation, which cannot tell a waiting job
    from a candidate: ``TypeError`` for ``waiting``, rather than act on the wrong jobs."""
    if selection.waiting is not None:
        raise TypeError(
            f"{operation} takes no waiting filter: list the jobs with "
            "list_jobs(waiting=...) and act on each"
        )


def _candidates(selection: JobFilter) -> JobFilter | None:
    """What the store selects for ``waiting=True``; None when no job can match (a status
    other than pending)."""
    if selection.status not in (None, "pending"):
        return None
    return replace(selection, status="pending")


def _read(
    find: Find, selection: JobFilter, order: JobOrder | None, newest: int | None, first: int
) -> Iterator[Job[Any]]:
    """Every job ``selection`` selects in ``order``, read in chunks of ``first`` jobs, then
    twice as many each time (a read at an offset passes over the rows before it)."""
    offset, size = 0, first
    while True:
        chunk = find(selection, JobPage(size, offset, order, newest))
        yield from chunk
        if len(chunk) < size:
            return
        offset += size
        size = max(size, min(size * 2, MOST_PER_READ))


def _kept(
    find: Find,
    selection: JobFilter,
    now: datetime,
    order: JobOrder | None,
    newest: int | None,
    wanted: int | None = None,
) -> Iterator[Job[Any]]:
    """The jobs ``selection`` (``waiting`` set) selects, exactly, in ``order``; the first
    read asks for ``wanted`` jobs if that is more than :data:`CANDIDATES_PER_READ`."""
    first = max(CANDIDATES_PER_READ, wanted or 0)
    if selection.waiting:
        candidates = _candidates(selection)
        if candidates is None:
            return iter(())
        read = _read(find, candidates, order, newest, first)
        return (j for j in read if is_waiting(j, now))
    read = _read(find, replace(selection, waiting=None), order, newest, first)
    return (j for j in read if not is_waiting(j, now))


def find_waiting(find: Find, selection: JobFilter, page: JobPage, now: datetime) -> list[Job[Any]]:
    """``list_jobs`` with ``waiting`` set: the ``page`` of the jobs it selects."""
    stop = page.offset + page.limit if page.limit else None
    kept = _kept(find, selection, now, page.order, page.newest, stop)
    return list(islice(kept, page.offset, stop))


def count_waiting(
    find: Find,
    count: Count,
    selection: JobFilter,
    now: datetime,
    *,
    at_most: int | None = None,
    newest: int | None = None,
) -> int:
    """``count_jobs`` with ``waiting`` set, stopped at ``at_most``."""
    if selection.waiting or newest is not None:
        return sum(1 for _ in islice(_kept(find, selection, now, None, newest), at_most))
    waiting = count_waiting(find, count, replace(selection, waiting=True), now)
    # Counting ``waiting`` more than ``at_most`` leaves at least ``at_most`` others.
    listed = count(replace(selection, waiting=None), None if at_most is None else at_most + waiting)
    others = max(0, listed - waiting)  # two reads: jobs may have moved in between
    return others if at_most is None else min(others, at_most)
