"""The SQLite store's reads in its own SQL (the flow is :mod:`durabl.stores.sql.reads`):
a job's logs, the listing filter's parts and SELECT, the stats' and overview's statements.
Here: integer-ms instants, INDEXED BY where the planner, without statistics, errs."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from durabl.model import activity
from durabl.model.job import STATUSES, Job, JobFilter, LogEntry
from durabl.model.rules import JobPage, served_by_index
from durabl.stores.sql.reads import STATUS_PARAMS, FilterSql, Reading, default_order, where_clause
from durabl.stores.sqlite import codec
from durabl.stores.sqlite.schema import (
    JOBS_TABLE,
    LOGS_TABLE,
    PAUSED_TYPES_TABLE,
    RECEIPTS_TABLE,
)

Params = dict[str, Any]
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
        "timeout", "parent_id", "parent_step",
    )
)  # fmt: skip
"""What a :class:`~durabl.model.job.Job` is built from (the lease's owner and last
heartbeat included, not its token)."""

_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit


def has_due(conn: sqlite3.Connection, type: str, now_ms: int) -> bool:
    """Whether any job of ``type`` is due (and the type not paused): a read, so an idle or
    paused poll never takes the write lock (the claim itself still decides, under it)."""
    row = conn.execute(
        f"SELECT 1 FROM {JOBS} INDEXED BY durabl_claim "
        "WHERE status = 'pending' AND type = ? AND run_at <= ? "
        f"AND NOT EXISTS (SELECT 1 FROM {PAUSED_TYPES_TABLE} WHERE type = ?) LIMIT 1",
        (type, now_ms, type),
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


def _equal(name: str, value: str) -> str:
    if name == "status":
        # The status as a literal (one of STATUSES, never other text), so the planner can
        # prove a partial index of one status (the pending jobs by due time) applies.
        return f"status = '{status_literal(value)}'"
    return f"{name} = :{name}"  # names from JobFilter, not input


def status_literal(status: str) -> str:
    """``status`` checked to be one of STATUSES, to be written into SQL as a literal."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    return status


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


FILTERS = FilterSql(
    equal=_equal,
    bound="{column} {op} :{name}",
    instant=codec.to_ms,  # integer-ms instants
    by_finish="finished_at DESC, seq DESC",  # durabl_status_finished read backwards
    newest_first="seq DESC",
    walk=f"seq IN (SELECT seq FROM {JOBS} WHERE {{listed}} ORDER BY {{own}} LIMIT :newest)",
    # Every search has an upper bound here (see search_hi).
    probes={(b, False): _SEARCH for b in (True, False)}
    | {(b, True): _SEARCH_OF_STATUS for b in (True, False)},
    row_matches=_MATCHES,
    search_bytes=lambda search: search.encode("utf-8", "surrogatepass"),
    # No bound: byte 0xFF, which no UTF-8 text holds, sorts above every key.
    search_hi=lambda bound: b"\xff" if bound is None else bound.encode("utf-8", "surrogatepass"),
    has_journal="journal IS NOT NULL AND journal <> '[]'",
)
"""SQLite's listing filter: integer-ms instants, byte comparisons of BLOB casts."""


def listing_statement(filters: JobFilter, page: JobPage) -> tuple[str, dict[str, Any]]:
    """The SELECT of ``find_jobs`` and its parameters (the query-plan tests read it)."""
    where, params = where_clause(filters, FILTERS, page.newest)
    params.update(limit=sql_limit(page.limit), offset=page.offset)
    sort = page.order
    window = "LIMIT :limit OFFSET :offset"
    if sort is None:
        order = default_order(filters, FILTERS)
    else:  # the field is one of JOB_ORDER_FIELDS, never user text; NULL sorts lowest
        order = f"{sort.field} {'DESC' if sort.descending else 'ASC'}, seq DESC"
    if sort is None or (page.newest is None and served_by_index(filters.status, sort.field)):
        # An index is read in this order (for a sort, INDEXED_ORDERS: ties, rare at
        # millisecond times, are sorted among themselves): rows are read for the page only.
        # Without statistics the planner prefers an equality on status and a sort of the
        # whole list to a scan of the pending jobs' due-time index: name it, unless a type
        # (durabl_type_status is read in due-time order) or a search (its probes) selects.
        index = ""
        if sort is not None and sort.field == "run_at" and not (filters.type or filters.search):
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


# -- stats: the statements of SqlReads.get_stats and stats_by_type -------------------------
def _counts(scope: str) -> str:
    # A range count per status (no grouping: half the time of a GROUP BY status at 1M).
    ranges = " UNION ALL ".join(
        f"SELECT :s{n} AS status, NULL AS failure_kind, count(*) AS n FROM {JOBS} "
        f"WHERE status = :s{n}{scope}"
        for n, status in enumerate(STATUSES)
        if status != "failed"
    )
    # Indexes named: without statistics the planner reads the rows (70 ms a read at 1M).
    return (
        f"{ranges} UNION ALL SELECT 'failed' AS status, failure_kind, count(*) AS n "
        f"FROM {JOBS} INDEXED BY durabl_failed_kind WHERE status = 'failed'{scope} "
        "GROUP BY failure_kind"
    )


def _oldest(due_index: str, scope: str) -> str:
    return (
        f"SELECT min(run_at) AS oldest, :now AS now FROM {JOBS} INDEXED BY {due_index} "
        f"WHERE status = 'pending' AND run_at <= :now{scope}"
    )


_OF_TYPE = " AND type = :type"
READS = {
    # One probe of durabl_type_status per type (the least type above the last), not a
    # read of every job's entry.
    "job_types": (
        f"WITH RECURSIVE seen(type) AS (SELECT min(type) FROM {JOBS} UNION ALL "
        f"SELECT (SELECT min(type) FROM {JOBS} WHERE type > seen.type) FROM seen "
        "WHERE seen.type IS NOT NULL) SELECT type FROM seen WHERE type IS NOT NULL"
    ),
    "stats_counts": _counts(""),
    "stats_counts_of_type": _counts(_OF_TYPE),
    "stats_oldest": _oldest("durabl_pending_run_at", ""),
    "stats_oldest_of_type": _oldest("durabl_type_status", _OF_TYPE),
    "stats_by_type_kinds": (
        f"SELECT type, failure_kind, count(*) AS n FROM {JOBS} INDEXED BY durabl_failed_kind "
        "WHERE status = 'failed' GROUP BY type, failure_kind"
    ),
}
"""The reads of :class:`~durabl.stores.sql.statements.Statements` written in SQLite's SQL."""

#: Types per statement of UNION ALL terms: well under SQLite's 500 terms of a compound select.
TYPES_PER_STATEMENT = 50


def _of_types(types: Sequence[str], window: activity.ActivityWindow | None = None) -> Params:
    """The types as parameters ``t0``, ``t1`` ... (and the window's bounds, in ms)."""
    params: Params = {f"t{n}": t for n, t in enumerate(types)}
    if window is not None:
        params.update(since=codec.to_ms(window.since), until=codec.to_ms(window.until))
    return params


def types_stats(types: Sequence[str], now: int) -> tuple[str, str, Params]:
    """A range count per (type, status) over ``durabl_type_status`` (one walk of the
    index, no grouping), and each type's oldest due pending job (one probe per type)."""
    params = {**_of_types(types), **STATUS_PARAMS, "now": now}
    counting = " UNION ALL ".join(
        f"SELECT :t{i} AS type, :s{j} AS status, count(*) AS n FROM {JOBS} "
        f"WHERE type = :t{i} AND status = :s{j}"
        for i in range(len(types))
        for j in range(len(STATUSES))
    )
    oldest = " UNION ALL ".join(
        f"SELECT :t{i} AS type, min(run_at) AS oldest, :now AS now FROM {JOBS} "
        f"WHERE type = :t{i} AND status = 'pending' AND run_at <= :now"
        for i in range(len(types))
    )
    return counting, oldest, params


# -- the admin's overview (durabl.model.activity) ------------------------------------------
_CANDIDATE_COLUMNS = "type, status, run_at, created_at, updated_at, heartbeat_at, attempt_history"


def activity_counts(window: activity.ActivityWindow, types: Sequence[str]) -> Reading:
    """Completed and failed jobs per (type, status, bucket), by ``finished_at``: a range
    of ``durabl_status_finished`` per status."""
    marks = ", ".join(f":t{n}" for n in range(len(types)))
    params = {**_of_types(types, window), "width": window.width_ms}
    statuses = ", ".join(f"'{s}'" for s in activity.COUNTED_STATUSES)  # constants, not input
    statement = (
        f"SELECT type, status, (finished_at - :since) / :width AS bucket, count(*) AS n "
        f"FROM {JOBS} WHERE status IN ({statuses}) AND finished_at >= :since "
        f"AND finished_at < :until AND type IN ({marks}) GROUP BY 1, 2, 3"
    )
    return statement, params


def activity_candidates(window: activity.ActivityWindow, types: Sequence[str]) -> Reading:
    """The lag line's candidates of up to 50 types in one statement: the earliest due
    pending jobs of each type (``durabl_type_status``), the active ones claimed in the
    window (``durabl_lease``) and the finished ones that span a bucket's end
    (``durabl_status_finished``)."""
    marks = ", ".join(f":t{n}" for n in range(len(types)))
    ends = window.ends
    params = {**_of_types(types, window), "scan": activity.PENDING_SCAN}
    params.update({f"e{n}": codec.to_ms(end) for n, end in enumerate(ends)})
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
    return statement, params
