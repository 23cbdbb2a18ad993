"""Read-only queries of the SQLite store: jobs with their logs, listings, counts, stats.

Each function runs inside a transaction the caller opened, so what it reads is one
consistent snapshot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from durabl.model import activity
from durabl.model.job import STATUSES, Job, JobFilter, LogEntry
from durabl.model.reports import QueueStats
from durabl.model.rules import (
    JobPage,
    lists_by_finish,
    prefix_upper_bound,
    served_by_index,
    stats_from_counts,
)
from durabl.stores.sql.rows import wait_candidate
from durabl.stores.sqlite import codec
from durabl.stores.sqlite.schema import JOBS_TABLE, LOGS_TABLE, RECEIPTS_TABLE

JOBS = JOBS_TABLE
LOGS = LOGS_TABLE
RECEIPTS = RECEIPTS_TABLE

JOB_COLUMNS = ", ".join(
    (
        "seq", "id", "type", "data", "status", "priority", "run_at", "attempts",
        "max_attempts", "dedupe_key", "dedupe_scope", "concurrency_key", "concurrency_limit",
        "created_at", "updated_at", "finished_at",
        "fail_reason", "failure_kind", "backoff", "backoff_delay", "backoff_max_delay",
        "journal", "attempt_history", "lease_owner", "heartbeat_at", "result", "trace_context",
    )
)  # fmt: skip
"""What a :class:`~durabl.model.job.Job` is built from (the lease's owner and last
heartbeat included, not its token)."""

_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit


def has_due(conn: sqlite3.Connection, type: str, now_ms: int) -> bool:
    """Whether any job of ``type`` is due: a read, so an idle poll never takes the write
    lock (the claim itself still decides, under the lock)."""
    row = conn.execute(
        f"SELECT 1 FROM {JOBS} INDEXED BY durabl_claim "
        "WHERE status = 'pending' AND type = ? AND run_at <= ? LIMIT 1",
        (type, now_ms),
    ).fetchone()
    return row is not None


def sql_limit(limit: int) -> int:
    """A cursor limit for SQL: 0 means none (-1 to SQLite)."""
    return -1 if limit == 0 else limit


def load_logs(conn: sqlite3.Connection, job_ids: Sequence[str]) -> dict[str, list[LogEntry]]:
    """The logs of each job in ``job_ids``, oldest first (jobs without logs are absent)."""
    logs: dict[str, list[LogEntry]] = {}
    for start in range(0, len(job_ids), _CHUNK):
        chunk = job_ids[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT job_id, at, message FROM {LOGS} WHERE job_id IN ({marks}) "
            "ORDER BY job_id, seq",
            tuple(chunk),
        )
        for row in rows:
            logs.setdefault(row["job_id"], []).append(codec.to_log(row))
    return logs


def jobs_from_rows(conn: sqlite3.Connection, rows: list[sqlite3.Row]) -> list[Job[Any]]:
    logs = load_logs(conn, [row["id"] for row in rows])
    return [codec.to_job(row, logs.get(row["id"], ())) for row in rows]


def filters(selection: JobFilter, newest: int | None = None) -> tuple[str, dict[str, Any]]:
    """A WHERE clause and its parameters. ``search`` is a prefix of the job id or of the
    dedupe key, or text in the failure reason, compared byte for byte (case-sensitive, no
    wildcards); ``newest``: only among that many of the first jobs of the list in its own
    order (a walk of the list's index: no search probes, no sort of the whole list)."""
    params: dict[str, Any] = selection.equal_fields()
    clauses = [f"{name} = :{name}" for name in params]  # names from JobFilter, not input
    if selection.status is not None:
        # The status as a literal (one of STATUSES, never other text), so the planner can
        # prove a partial index of one status (the pending jobs by due time) applies.
        clauses[0] = f"status = '{status_literal(selection.status)}'"
    for name, column, op, value in selection.ranges():
        clauses.append(f"{column} {op} :{name}")
        params[name] = codec.to_ms(value)
    if newest is not None:
        listed = " AND ".join(clauses) or "1"
        clauses = [
            f"seq IN (SELECT seq FROM {JOBS} WHERE {listed} "
            f"ORDER BY {default_order(selection)} LIMIT :newest)"
        ]
        params["newest"] = newest
    search = selection.search
    if search:
        prefix = search.encode("utf-8", "surrogatepass")
        if newest is None:
            clauses.append(_SEARCH_OF_STATUS if "status" in params else _SEARCH)
        else:
            clauses.append(_MATCHES)
        bound = prefix_upper_bound(search)
        params.update(
            search_len=len(prefix),
            search_bytes=prefix,
            # No bound: byte 0xFF, which no UTF-8 text holds, sorts above every key.
            search_hi=b"\xff" if bound is None else bound.encode("utf-8", "surrogatepass"),
        )
    return (" AND ".join(clauses) or "1"), params


def status_literal(status: str) -> str:
    """``status`` checked to be one of STATUSES, to be written into SQL as a literal."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    return status


def default_order(selection: JobFilter) -> str:
    """A list's own order (:func:`~durabl.model.rules.lists_by_finish`), which an index
    serves: ``durabl_status_finished`` read backwards, or the jobs' own key."""
    return "finished_at DESC, seq DESC" if lists_by_finish(selection) else "seq DESC"


# A key starts with the search exactly when its UTF-8 bytes start with the search's: no
# LIKE wildcards, no case folding, NUL-safe. Each part is a probe of an index (the id's,
# the dedupe key's, the jobs that have a failure reason) bounded to the keys between the
# search and the least string above all that start with it, so a search of a million jobs
# reads only what it matches, not every job of the list.
_STARTS = "substr(CAST({c} AS BLOB), 1, :search_len) = :search_bytes"
_IN_RANGE = "{c} >= CAST(:search_bytes AS TEXT) AND {c} < CAST(:search_hi AS TEXT)"
_PROBES = (
    f"seq IN (SELECT seq FROM {JOBS} WHERE {_IN_RANGE.format(c='id')} AND "
    f"{_STARTS.format(c='id')} UNION ALL SELECT seq FROM {JOBS} INDEXED BY durabl_dedupe_key "
    f"WHERE dedupe_key IS NOT NULL AND {_IN_RANGE.format(c='dedupe_key')} AND "
    f"{_STARTS.format(c='dedupe_key')} UNION ALL SELECT seq FROM {JOBS} INDEXED BY "
    "durabl_reason_by_status WHERE fail_reason IS NOT NULL{status} AND "
    "instr(CAST(fail_reason AS BLOB), :search_bytes) > 0)"
)
_SEARCH = _PROBES.format(status="")
# A list of one status probes only its own jobs' reasons (the reasons' index is by
# status): the completed list's search does not read the failed jobs' reasons.
_SEARCH_OF_STATUS = _PROBES.format(status=" AND status = :status")
# The same test of one row, for a walk of the newest jobs of a list.
_MATCHES = (
    f"({_STARTS.format(c='id')} OR {_STARTS.format(c='dedupe_key')} OR "
    "(fail_reason IS NOT NULL AND instr(CAST(fail_reason AS BLOB), :search_bytes) > 0))"
)


def listing_statement(selection: JobFilter, page: JobPage) -> tuple[str, dict[str, Any]]:
    """The SELECT of ``find_jobs`` and its parameters (the query-plan tests read it)."""
    where, params = filters(selection, page.newest)
    params.update(limit=sql_limit(page.limit), offset=page.offset)
    sort = page.order
    window = "LIMIT :limit OFFSET :offset"
    if sort is None:
        order = default_order(selection)
    else:  # the field is one of JOB_ORDER_FIELDS, never user text; NULL sorts lowest
        order = f"{sort.field} {'DESC' if sort.descending else 'ASC'}, seq DESC"
    if sort is None or (page.newest is None and served_by_index(selection.status, sort.field)):
        # An index is read in this order (for a sort, INDEXED_ORDERS: ties, rare at
        # millisecond times, are sorted among themselves): rows are read for the page only.
        # Without statistics the planner prefers an equality on status and a sort of the
        # whole list to a scan of the pending jobs' due-time index: name it, unless a type
        # (durabl_type_status is read in due-time order) or a search (its probes) selects.
        index = ""
        if sort is not None and sort.field == "run_at" and not (selection.type or selection.search):
            index = " INDEXED BY durabl_pending_run_at"
        statement = (
            f"SELECT {JOB_COLUMNS} FROM {JOBS}{index} WHERE {where} ORDER BY {order} {window}"
        )
    else:
        # No index serves it: sort the selected rows by their key alone, then read the
        # columns of the page's rows only (sorting whole rows copies every payload into
        # the sorter: 2-5x slower at 1M).
        statement = (
            f"SELECT {JOB_COLUMNS} FROM {JOBS} WHERE seq IN (SELECT seq FROM {JOBS} "
            f"WHERE {where} ORDER BY {order} {window}) ORDER BY {order}"
        )
    return statement, params


def stats(conn: sqlite3.Connection, type: str | None, now: datetime) -> QueueStats:
    scope = "" if type is None else " AND type = :type"
    params: dict[str, Any] = {"type": type, "now": codec.to_ms(now)}
    # A range count per status walks the index once, with no grouping to do: about half
    # the time of one GROUP BY status over a million jobs.
    params.update({f"s{n}": status for n, status in enumerate(STATUSES)})
    ranges = " UNION ALL ".join(
        f"SELECT :s{n}, count(*) FROM {JOBS} WHERE status = :s{n}{scope}"
        for n in range(len(STATUSES))
    )
    counts = {status: n for status, n in conn.execute(ranges, params) if n}
    # The indexes named: without statistics the planner reads each failed or pending job's
    # row through durabl_status_finished instead (70 ms each at a million jobs).
    by_kind = dict(
        conn.execute(
            f"SELECT failure_kind, count(*) FROM {JOBS} INDEXED BY durabl_failed_kind "
            f"WHERE status = 'failed'{scope} GROUP BY failure_kind",
            params,
        )
    )
    due = "durabl_type_status" if type is not None else "durabl_pending_run_at"
    oldest_ms = conn.execute(
        f"SELECT min(run_at) FROM {JOBS} INDEXED BY {due} "
        f"WHERE status = 'pending' AND run_at <= :now{scope}",
        params,
    ).fetchone()[0]
    oldest = codec.from_ms(oldest_ms) if oldest_ms is not None else None
    return stats_from_counts(counts, by_kind, oldest, now)


def job_types(conn: sqlite3.Connection) -> list[str]:
    """Every type, in code point order: one probe of ``durabl_type_status`` per type (the
    least type above the last), not a read of every job's entry."""
    rows = conn.execute(
        f"WITH RECURSIVE seen(type) AS (SELECT min(type) FROM {JOBS} UNION ALL "
        f"SELECT (SELECT min(type) FROM {JOBS} WHERE type > seen.type) FROM seen "
        "WHERE seen.type IS NOT NULL) SELECT type FROM seen WHERE type IS NOT NULL"
    )
    return [row[0] for row in rows]


# Types per statement of UNION ALL terms: well under SQLite's 500 terms of a compound select.
_TYPES_PER_STATEMENT = 50


def _chunks(types: Sequence[str]) -> list[Sequence[str]]:
    return [types[n : n + _TYPES_PER_STATEMENT] for n in range(0, len(types), _TYPES_PER_STATEMENT)]


def stats_by_type(conn: sqlite3.Connection, now: datetime) -> dict[str, QueueStats]:
    """:func:`stats` of every type: a range count per (type, status) over
    ``durabl_type_status`` (one walk of the index, no grouping), failed jobs by type and
    kind, and each type's oldest due pending job (one index probe per type); three
    statements for up to 50 types."""
    types = job_types(conn)
    stats: dict[str, QueueStats] = {}
    kinds: dict[str, dict[str, int]] = {t: {} for t in types}
    if types:
        for job_type, kind, n in conn.execute(
            f"SELECT type, failure_kind, count(*) FROM {JOBS} INDEXED BY durabl_failed_kind "
            "WHERE status = 'failed' GROUP BY type, failure_kind"
        ):
            kinds.setdefault(job_type, {})[kind] = n
    for chunk in _chunks(types):
        stats.update(_stats_of(conn, chunk, kinds, now))
    return stats


def _stats_of(
    conn: sqlite3.Connection,
    types: Sequence[str],
    kinds: dict[str, dict[str, int]],
    now: datetime,
) -> dict[str, QueueStats]:
    params: dict[str, Any] = {f"t{n}": t for n, t in enumerate(types)}
    params.update({f"s{n}": s for n, s in enumerate(STATUSES)})
    params["now"] = codec.to_ms(now)
    counts: dict[str, dict[str, int]] = {t: {} for t in types}
    ranges = " UNION ALL ".join(
        f"SELECT :t{i}, :s{j}, count(*) FROM {JOBS} WHERE type = :t{i} AND status = :s{j}"
        for i in range(len(types))
        for j in range(len(STATUSES))
    )
    for job_type, status, n in conn.execute(ranges, params):
        if n:
            counts[job_type][status] = n
    oldest = " UNION ALL ".join(
        f"SELECT :t{i}, min(run_at) FROM {JOBS} "
        f"WHERE type = :t{i} AND status = 'pending' AND run_at <= :now"
        for i in range(len(types))
    )
    due = {job_type: ms for job_type, ms in conn.execute(oldest, params)}
    return {
        t: stats_from_counts(
            counts[t], kinds[t], None if due.get(t) is None else codec.from_ms(due[t]), now
        )
        for t in types
    }


_CANDIDATE_COLUMNS = "type, status, run_at, created_at, updated_at, heartbeat_at, attempt_history"


def activity_counts(
    conn: sqlite3.Connection, window: activity.ActivityWindow, types: Sequence[str]
) -> dict[tuple[str, str, int], int]:
    """Completed and failed jobs of ``types`` per (type, status, bucket) of ``window``,
    by ``finished_at``: a range of ``durabl_status_finished`` per status."""
    marks = ", ".join(f":t{n}" for n in range(len(types)))
    params: dict[str, Any] = {f"t{n}": t for n, t in enumerate(types)}
    params.update(since=codec.to_ms(window.since), until=codec.to_ms(window.until))
    params["width"] = window.width_ms
    statuses = ", ".join(f"'{s}'" for s in activity.COUNTED_STATUSES)  # constants, not input
    rows = conn.execute(
        f"SELECT type, status, (finished_at - :since) / :width, count(*) FROM {JOBS} "
        f"WHERE status IN ({statuses}) AND finished_at >= :since AND finished_at < :until "
        f"AND type IN ({marks}) GROUP BY 1, 2, 3",
        params,
    )
    return {(t, s, b): n for t, s, b, n in rows}


def activity_candidates(
    conn: sqlite3.Connection, window: activity.ActivityWindow, types: Sequence[str]
) -> tuple[activity.WaitCandidate, ...]:
    """The jobs of ``types`` that may have waited across a bucket's end of ``window`` (see
    :meth:`durabl.stores.base.Backend.read_activity`), in one statement for up to 50
    types: the earliest due pending jobs of each type (``durabl_type_status``), the active
    ones claimed in the window (``durabl_lease``) and the finished ones that span a
    bucket's end (``durabl_status_finished``)."""
    return tuple(job for chunk in _chunks(types) for job in _candidates_of(conn, window, chunk))


def _candidates_of(
    conn: sqlite3.Connection, window: activity.ActivityWindow, types: Sequence[str]
) -> list[activity.WaitCandidate]:
    marks = ", ".join(f":t{n}" for n in range(len(types)))
    params: dict[str, Any] = {f"t{n}": t for n, t in enumerate(types)}
    ends = window.ends
    params.update({f"e{n}": codec.to_ms(end) for n, end in enumerate(ends)})
    params.update(since=codec.to_ms(window.since), until=codec.to_ms(window.until))
    params["scan"] = activity.PENDING_SCAN
    pending = [
        f"SELECT * FROM (SELECT {_CANDIDATE_COLUMNS} FROM {JOBS} WHERE type = :t{n} "
        "AND status = 'pending' AND run_at <= :until ORDER BY run_at, seq DESC LIMIT :scan)"
        for n in range(len(types))
    ]
    finished = ", ".join(f"'{s}'" for s in activity.FINISHED_STATUSES)  # constants
    spans = " OR ".join(f"(run_at <= :e{n} AND finished_at > :e{n})" for n in range(len(ends)))
    statement = " UNION ALL ".join(
        [
            *pending,
            f"SELECT {_CANDIDATE_COLUMNS} FROM {JOBS} WHERE status = 'active' "
            f"AND heartbeat_at >= :since AND type IN ({marks})",
            f"SELECT {_CANDIDATE_COLUMNS} FROM {JOBS} WHERE status IN ({finished}) "
            f"AND finished_at > :e0 AND type IN ({marks}) AND ({spans})",
        ]
    )
    return [wait_candidate(row, codec.from_ms) for row in conn.execute(statement, params)]
