"""The read statements of the PostgreSQL store (listings, searches, counts, stats, the
admin's overview, the listener's timers), as templates that
:meth:`durabl.stores.postgres.sql.Queries.for_tables` renders (``{jobs}``, ``{now}``,
``{job_columns}``); the fragments a listing's filter is built from
(:mod:`durabl.stores.postgres.reads`).
"""

from __future__ import annotations

from durabl.model.job import TERMINAL_STATUSES

ORDER_NEWEST = "j.seq DESC"
ORDER_FINISHED = "j.finished_at DESC, j.seq DESC"
FILTERS = {
    "status": "j.status = %(status)s",
    "type": "j.type = %(type)s",
    "failure_kind": "j.failure_kind = %(failure_kind)s",
    "parent_id": "j.parent_id = %(parent_id)s",
}
# An id or a dedupe key whose UTF-8 bytes start with the search's, or a failure reason
# that holds them: no LIKE wildcards, no case folding, whatever the collation. Each part
# probes an index (text_pattern_ops on id and dedupe_key: byte order, whatever the
# database's collation; the partial index of the jobs with a reason), the keys bounded to
# [search, the least string above all that start with it): a search of a million jobs reads
# what it matches, not every job of the list.
_STARTS = "substring(convert_to({a}.{c}, 'UTF8') FROM 1 FOR %(search_len)s) = %(search_bytes)s"
_HOLDS = (
    "{a}.fail_reason IS NOT NULL "
    "AND position(%(search_bytes)s IN convert_to({a}.fail_reason, 'UTF8')) > 0"
)
_FROM = "s.{c} ~>=~ %(search)s{upper}"
SEARCH = (
    # ANY(ARRAY(...)): the matches are found first, then looked up by seq, however the
    # list is ordered (an IN (subquery) lets the planner walk the whole list instead).
    "j.seq = ANY(ARRAY(SELECT s.seq FROM {jobs} AS s WHERE "
    + _FROM.format(c="id", upper="{upper_id}")
    + " AND "
    + _STARTS.format(a="s", c="id")
    + " UNION ALL SELECT s.seq FROM {jobs} AS s WHERE "
    + _FROM.format(c="dedupe_key", upper="{upper_key}")
    + " AND "
    + _STARTS.format(a="s", c="dedupe_key")
    + " UNION ALL SELECT s.seq FROM {jobs} AS s WHERE "
    + _HOLDS.format(a="s")
    # A list of one status probes only its own jobs' reasons (the reasons' index is by
    # status): the completed list's search does not read the failed jobs' reasons.
    + "{reason_status}))"
)
# The first jobs of a list in its own order (``{listed}``, ``{order}``: an index's): a walk
# that stops after that many jobs, for a broad search (then the search's test of each row,
# instead of probes that gather every match first) or a sort no index serves.
LIST_WALK = (
    "j.seq = ANY(ARRAY(SELECT j.seq FROM {jobs} AS j WHERE {listed} ORDER BY {own} "
    "LIMIT %(newest)s))"
)
# The same jobs as the source a page reads from (each row read once, in the index's order).
WALK_SOURCE = "(SELECT j.* FROM {jobs} AS j WHERE {listed} ORDER BY {own} LIMIT %(newest)s) AS j"
_ROW_TESTS = (
    _STARTS.format(a="j", c="id"),
    _STARTS.format(a="j", c="dedupe_key"),
    _HOLDS.format(a="j"),
)
ROW_MATCHES = "(" + " OR ".join(f"({test})" for test in _ROW_TESTS) + ")"


def order_by(field: str, descending: bool, status: str | None = None) -> str:
    """The ORDER BY of a sorted listing (``field`` from JOB_ORDER_FIELDS, never user text);
    text compares by code point (``COLLATE "C"``), as on every store; ties newest first. A
    finish time of a job not finished (NULL) sorts lowest, as on every store; a list of
    finished jobs has none, and its plain order is the one its index is read in."""
    column = f'j.{field} COLLATE "C"' if field == "type" else f"j.{field}"
    direction = "DESC" if descending else "ASC"
    if field == "finished_at" and status not in TERMINAL_STATUSES:
        direction += " NULLS LAST" if descending else " NULLS FIRST"
    return f"{column} {direction}, j.seq DESC"


# get_stats: counts per status and kind, and the oldest due pending job.
_BY_KIND = "GROUP BY status, failure_kind"
_CANDIDATE = (
    "j.type, j.status, j.run_at, j.created_at, j.updated_at, j.heartbeat_at, j.attempt_history"
)
_OLDEST = "SELECT (SELECT min(run_at) FROM {jobs} WHERE status = 'pending' AND run_at <= {now}"


READS: dict[str, str] = {
    "get_job": "SELECT {job_columns} FROM {jobs} AS j WHERE j.id = %(id)s",
    "has_outstanding": (
        "SELECT 1 FROM {jobs} WHERE type = %(type)s AND "
        "(live_slot = %(key)s OR pending_slot = %(key)s OR active_slot = %(key)s) LIMIT 1"
    ),
    # The page's keys first (an index's order, or a sort of the keys alone), then the
    # columns of those rows only: the rows a deep page skips, and the rows a sort orders,
    # are never read whole (their logs neither), nor sorted with their payloads.
    "list_jobs": (
        "SELECT {job_columns} FROM {jobs} AS j WHERE j.seq = ANY(ARRAY("
        "SELECT j.seq FROM {source} WHERE {where} ORDER BY {order} "
        "LIMIT %(limit)s OFFSET %(offset)s)) ORDER BY {order}"
    ),
    "count_jobs": "SELECT count(*) AS n FROM {jobs} AS j WHERE {where}",
    "count_jobs_at_most": (
        "SELECT count(*) AS n FROM (SELECT 1 FROM {jobs} AS j WHERE {where} "
        "LIMIT %(at_most)s) AS counted"
    ),
    "matching_ids": "SELECT j.id FROM {jobs} AS j WHERE {where} ORDER BY j.seq",
    # Two statements each, with and without a type: an ``(%(type)s IS NULL OR ...)``
    # predicate keeps a prepared statement's generic plan off the type's index.
    "stats_counts": "SELECT status, failure_kind, count(*) AS n FROM {jobs} " + _BY_KIND,
    "stats_counts_of_type": (
        "SELECT status, failure_kind, count(*) AS n FROM {jobs} WHERE type = %(type)s " + _BY_KIND
    ),
    "stats_oldest": _OLDEST + ") AS oldest, {now} AS now",
    "stats_oldest_of_type": _OLDEST + " AND type = %(type)s) AS oldest, {now} AS now",
    # A loose index scan: one probe of the (type, status, run_at) index per type, where
    # DISTINCT reads every job.
    "job_types": (
        "WITH RECURSIVE t(type) AS (SELECT min(type) FROM {jobs} UNION ALL "
        "SELECT (SELECT min(type) FROM {jobs} WHERE type > t.type) FROM t "
        "WHERE t.type IS NOT NULL) SELECT type FROM t WHERE type IS NOT NULL ORDER BY type"
    ),
    # -- the admin's overview (durabl.model.activity) ------------------------------------
    # Every type's stats: a range count per (type, status) (an index-only scan of the
    # (type, status, run_at) index each: no aggregate over a million rows to hash), failed
    # jobs per (type, kind), then one probe of each type's oldest due pending job.
    "stats_by_type_counts": (
        "SELECT t.type, s.status, (SELECT count(*) FROM {jobs} "
        "WHERE type = t.type AND status = s.status) AS n FROM unnest(%(types)s::text[]) "
        "AS t(type) CROSS JOIN unnest(%(statuses)s::text[]) AS s(status)"
    ),
    "stats_by_type_kinds": (
        "SELECT type, failure_kind, count(*) AS n FROM {jobs} WHERE status = 'failed' "
        "GROUP BY type, failure_kind"
    ),
    "stats_by_type_oldest": (
        "SELECT t.type, (SELECT min(run_at) FROM {jobs} WHERE type = t.type "
        "AND status = 'pending' AND run_at <= {now}) AS oldest, {now} AS now "
        "FROM unnest(%(types)s::text[]) AS t(type)"
    ),
    # Completed and failed jobs per (type, status, bucket), by finished_at.
    "activity_counts": (
        "SELECT type, status, floor(extract(epoch FROM finished_at - %(since)s::timestamptz) "
        "* 1000 / %(width)s)::int AS bucket, count(*) AS n FROM {jobs} "
        "WHERE status IN ('completed', 'failed') AND finished_at >= %(since)s "
        "AND finished_at < %(until)s AND type = ANY(%(types)s::text[]) GROUP BY 1, 2, 3"
    ),
    # The jobs that may have waited across a bucket's end: each type's earliest due pending
    # jobs, the active ones claimed in the window, the finished ones spanning an end.
    "activity_candidates": (
        "SELECT c.* FROM unnest(%(types)s::text[]) AS t(type) CROSS JOIN LATERAL ("
        "SELECT " + _CANDIDATE + " FROM {jobs} AS j WHERE j.type = t.type "
        "AND j.status = 'pending' AND j.run_at <= %(until)s "
        "ORDER BY j.run_at, j.seq DESC LIMIT %(scan)s) AS c "
        "UNION ALL SELECT " + _CANDIDATE + " FROM {jobs} AS j WHERE j.status = 'active' "
        "AND j.heartbeat_at >= %(since)s AND j.type = ANY(%(types)s::text[]) "
        "UNION ALL SELECT " + _CANDIDATE + " FROM {jobs} AS j "
        "WHERE j.status = ANY(%(finished)s::text[]) AND j.finished_at > %(first_end)s "
        "AND j.type = ANY(%(types)s::text[]) AND EXISTS (SELECT 1 FROM "
        "unnest(%(ends)s::timestamptz[]) AS e(at) WHERE j.run_at <= e.at AND j.finished_at > e.at)"
    ),
    # The listener's timers: how long until the next future job of each type is due.
    "next_due": (
        "SELECT type, ceil(extract(epoch FROM min(run_at) - {now}) * 1000)::bigint AS delay_ms "
        "FROM {jobs} WHERE status = 'pending' AND type = ANY(%(types)s::text[]) "
        "AND run_at > {now} GROUP BY type"
    ),
    "server_now": "SELECT {now} AS now",
}


#: The event subscriptions' statements (a table of its own, beside the reads for brevity).
SUBSCRIPTIONS: dict[str, str] = {
    "upsert_subscription": (
        "INSERT INTO {subscriptions} (event, type) VALUES (%(event)s, %(type)s) "
        "ON CONFLICT (event, type) DO NOTHING"
    ),
    "load_subscriptions": "SELECT event, type FROM {subscriptions}",
    "load_event_subscriptions": ("SELECT event, type FROM {subscriptions} WHERE event = %(event)s"),
    "delete_subscription": (
        "DELETE FROM {subscriptions} WHERE event = %(event)s AND type = %(type)s"
    ),
    # The job's row is locked while its signal is numbered: two senders to one job then
    # commit in the order of their numbers, so a wait that read number n never finds a
    # lower one committed after it (an identity value is taken at insert, not at commit).
    "store_signal": (
        "INSERT INTO {signals} (job_id, name, data, sent_at) "
        "SELECT j.id, %(name)s, %(data)s, %(sent_at)s FROM {jobs} AS j "
        "WHERE j.id = %(job_id)s AND j.status IN ('pending', 'active') "
        "FOR NO KEY UPDATE RETURNING seq"
    ),
    "next_signal": (
        "SELECT seq, name, data, sent_at FROM {signals} WHERE job_id = %(job_id)s "
        "AND name = %(name)s AND seq > %(after)s ORDER BY seq LIMIT 1"
    ),
}
