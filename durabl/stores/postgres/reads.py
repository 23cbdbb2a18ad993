"""The PostgreSQL store's listing filters (a WHERE clause from FILTERS, the search walk
and probes) and the admin overview's parameters; the shared flow
(:class:`~durabl.stores.sql.reads.SqlReads`) runs them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durabl.model.activity import FINISHED_STATUSES, PENDING_SCAN, ActivityWindow
from durabl.model.job import JobFilter
from durabl.stores.postgres.queries import FILTERS, ORDER_FINISHED, ORDER_NEWEST, ROW_MATCHES
from durabl.stores.postgres.sql import Queries
from durabl.stores.sql.reads import FilterSql, listed, walk


def _search_bytes(search: str) -> bytes | None:
    try:
        prefix = search.encode("utf-8")
    except UnicodeEncodeError:  # no stored id or key is anything but valid UTF-8
        return None
    return None if b"\x00" in prefix else prefix  # nor holds a NUL


def filter_sql(q: Queries) -> FilterSql:
    """PostgreSQL's listing filter over the tables of ``q``: timestamptz instants as they
    are, the ``~>=~`` byte-order probes of :data:`~durabl.stores.postgres.queries.SEARCH`."""
    return FilterSql(
        equal=lambda name, value: FILTERS[name],
        bound="j.{column} {op} %({name})s",
        instant=lambda value: value,
        by_finish=ORDER_FINISHED,  # status_finished read backwards
        newest_first=ORDER_NEWEST,
        walk=q.list_walk,
        probes=q.searches,
        row_matches=ROW_MATCHES,
        search_bytes=_search_bytes,
        search_hi=lambda bound: bound,
        has_journal="j.journal_len > 0",
    )


def walk_source(selection: JobFilter, q: Queries, sql: FilterSql) -> str:
    """The first ``%(newest)s`` jobs of the list (its filters but the search) in its own
    order, as a FROM source aliased ``j``: one read of the list's index and of those rows
    (not one probe of the key per job), which a page then sorts or searches (see
    :func:`~durabl.stores.sql.reads.where_clause` with ``walked``)."""
    return walk(q.walk_source, listed(selection, sql)[0], selection, sql)


def activity_params(window: ActivityWindow, types: Sequence[str]) -> dict[str, Any]:
    """The parameters of ``activity_counts`` and ``activity_candidates`` (arrays)."""
    return {
        "types": list(types),
        "since": window.since,
        "until": window.until,
        "width": window.width_ms,
        "scan": PENDING_SCAN,
        "finished": list(FINISHED_STATUSES),
        "first_end": window.ends[0],
        "ends": list(window.ends),
    }
