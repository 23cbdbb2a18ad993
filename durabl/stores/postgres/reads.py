"""Read-only queries of the PostgreSQL store that take more than a line: listing filters,
stats and the admin overview's reads. Each runs on the cursor of the operation the caller opened."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import Cursor
from psycopg.rows import DictRow

from durabl.model.activity import (
    FINISHED_STATUSES,
    PENDING_SCAN,
    ActivityRead,
    ActivityWindow,
)
from durabl.model.clock import as_utc
from durabl.model.job import STATUSES, JobFilter
from durabl.model.reports import QueueStats
from durabl.model.rules import lists_by_finish, prefix_upper_bound, stats_from_counts
from durabl.stores.postgres.queries import FILTERS, ORDER_FINISHED, ORDER_NEWEST, ROW_MATCHES
from durabl.stores.postgres.sql import Queries
from durabl.stores.sql.rows import wait_candidate


def one(cur: Cursor[DictRow], statement: str, params: dict[str, Any]) -> DictRow | None:
    """The first row ``statement`` returns (None: no row)."""
    cur.execute(statement, params)
    return cur.fetchone()


def stats(cur: Cursor[DictRow], q: Queries, params: dict[str, Any]) -> QueueStats:
    """Counts per status and failure kind, and the oldest due pending job, at the store's
    ``now`` (the server's, unless a clock was injected)."""
    typed = params["type"] is not None
    cur.execute(q.stats_counts_of_type if typed else q.stats_counts, params)
    counts: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    for row in cur.fetchall():
        counts[row["status"]] = counts.get(row["status"], 0) + int(row["n"])
        if row["status"] == "failed" and row["failure_kind"] is not None:
            by_kind[row["failure_kind"]] = int(row["n"])
    found = one(cur, q.stats_oldest_of_type if typed else q.stats_oldest, params)
    assert found is not None
    oldest = found["oldest"]
    return stats_from_counts(
        counts, by_kind, None if oldest is None else as_utc(oldest), as_utc(found["now"])
    )


def default_order(selection: JobFilter) -> str:
    """A list's own order (:func:`~durabl.model.rules.lists_by_finish`), which an index
    serves: ``status_finished`` read backwards, or the jobs' own key."""
    return ORDER_FINISHED if lists_by_finish(selection) else ORDER_NEWEST


def filters(
    selection: JobFilter, q: Queries, newest: int | None = None, *, walked: bool = False
) -> tuple[str, dict[str, Any]]:
    """A WHERE clause built from :data:`FILTERS` and its parameters. ``search`` is a prefix
    of the job id or of the dedupe key, or text in the failure reason, byte for byte;
    ``newest``: only among that many of the first jobs of the list in its own order (a
    walk of the list's index: no search probes, no sort of the whole list); ``walked``:
    the statement reads those jobs from :func:`walk_source`, so the WHERE tests the search
    alone."""
    clauses, params = _listed(selection)
    if newest is not None:
        params["newest"] = newest
        clauses = [] if walked else [_walk(q.list_walk, clauses, selection)]
    search = selection.search
    if search:
        try:
            prefix = search.encode("utf-8")
        except UnicodeEncodeError:  # no stored id or key is anything but valid UTF-8
            return "false", params
        if b"\x00" in prefix:  # nor holds a NUL
            return "false", params
        bound = prefix_upper_bound(search)
        if newest is not None:
            clauses.append(ROW_MATCHES)
        else:
            clauses.append(q.searches[bound is not None, "status" in params])
        params.update(search=search, search_len=len(prefix), search_bytes=prefix)
        params["search_hi"] = bound
    return (" AND ".join(clauses) or "true"), params


def walk_source(selection: JobFilter, q: Queries) -> str:
    """The first ``%(newest)s`` jobs of the list (its filters but the search) in its own
    order, as a FROM source aliased ``j``: one read of the list's index and of those rows
    (not one probe of the key per job), which a page then sorts or searches (see
    :func:`filters` with ``walked``)."""
    return _walk(q.walk_source, _listed(selection)[0], selection)


def _listed(selection: JobFilter) -> tuple[list[str], dict[str, Any]]:
    """The list's tests (every filter but the search) and their parameters."""
    params: dict[str, Any] = selection.equal_fields()
    clauses = [FILTERS[name] for name in params]
    for name, column, op, value in selection.ranges():  # names from JobFilter, not input
        clauses.append(f"j.{column} {op} %({name})s")
        params[name] = value
    return clauses, params


def _walk(template: str, listed: list[str], selection: JobFilter) -> str:
    return template.replace("{listed}", " AND ".join(listed) or "true").replace(
        "{own}", default_order(selection)
    )


def stats_by_type(cur: Cursor[DictRow], q: Queries, now: datetime | None) -> dict[str, QueueStats]:
    """:func:`stats` of every type: four statements, whatever the number of types."""
    cur.execute(q.job_types)
    types = [row["type"] for row in cur.fetchall()]
    if not types:
        return {}
    cur.execute(q.stats_by_type_counts, {"types": types, "statuses": list(STATUSES)})
    counts: dict[str, dict[str, int]] = {t: {} for t in types}
    for row in cur.fetchall():
        if row["n"]:
            counts[row["type"]][row["status"]] = int(row["n"])
    cur.execute(q.stats_by_type_kinds)
    kinds: dict[str, dict[str, int]] = {}
    for row in cur.fetchall():
        kinds.setdefault(row["type"], {})[row["failure_kind"]] = int(row["n"])
    cur.execute(q.stats_by_type_oldest, {"types": types, "now": now})
    stats = {}
    for row in cur.fetchall():
        oldest = row["oldest"]
        stats[row["type"]] = stats_from_counts(
            counts[row["type"]],
            kinds.get(row["type"], {}),
            None if oldest is None else as_utc(oldest),
            as_utc(row["now"]),
        )
    return {t: stats[t] for t in types}


def activity_read(
    cur: Cursor[DictRow], q: Queries, window: ActivityWindow, types: tuple[str, ...]
) -> ActivityRead:
    """Two statements: the counts per bucket, then the lag line's candidates."""
    params: dict[str, Any] = {
        "types": list(types),
        "since": window.since,
        "until": window.until,
        "width": window.width_ms,
        "scan": PENDING_SCAN,
        "finished": list(FINISHED_STATUSES),
        "first_end": window.ends[0],
        "ends": list(window.ends),
    }
    cur.execute(q.activity_counts, params)
    counts = {(r["type"], r["status"], int(r["bucket"])): int(r["n"]) for r in cur.fetchall()}
    cur.execute(q.activity_candidates, params)
    candidates = tuple(wait_candidate(r, as_utc) for r in cur.fetchall())
    return ActivityRead(counts, candidates)
