"""SqlReads: the reads of the SQL store, written once for SQLite and PostgreSQL: how a
listing filter becomes a WHERE clause and its parameters (:func:`where_clause`), which
statements run in one read transaction, and how their rows become jobs, QueueStats and
an ActivityRead. A dialect writes only the SQL text (its statements, its listing filter's
parts as a :class:`FilterSql`, the reads over many types whose text depends on how many)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durabl.model.activity import ActivityRead, ActivityWindow
from durabl.model.job import STATUSES, Job, JobFilter
from durabl.model.reports import QueueStats
from durabl.model.rules import JobPage, lists_by_finish, prefix_upper_bound, stats_from_counts
from durabl.stores.sql.rows import wait_candidate
from durabl.stores.sql.statements import C, selecting
from durabl.stores.sql.writes import SqlWrites

Reading = tuple[str, dict[str, Any]]
"""A statement and its parameters."""

#: The statuses as parameters ``s0``, ``s1`` ... (SQLite counts each in a term of its own).
STATUS_PARAMS = {f"s{n}": status for n, status in enumerate(STATUSES)}


def chunked(types: Sequence[str], size: int | None) -> list[Sequence[str]]:
    """``types`` in runs of ``size`` (None: one run, even of no types)."""
    if size is None:
        return [types]
    return [types[n : n + size] for n in range(0, len(types), size)]


# -- listing filters ----------------------------------------------------------------------
@dataclass(frozen=True)
class FilterSql:
    """The SQL text of a listing filter's parts in one dialect: ``equal`` (name, value)
    -> a job field's test; ``bound``: a time bound's test (``{column}``, ``{op}``, the
    parameter ``{name}``), its value as ``instant`` makes it; the list's own orders (an
    index serves each: ``by_finish`` for a list of finished jobs, else ``newest_first``);
    ``walk``: the first ``newest`` jobs of the list (``{listed}``: its tests, ``{own}``:
    its order); the search's ``probes`` by (it has an upper bound, the list is of one
    status), or its ``row_matches`` test of a row walked; ``search_bytes``: the bytes it
    compares (None: no stored key holds them); ``search_hi``: the parameter of its upper
    bound (given None when no string is above all that start with the search);
    ``has_journal``: the test of a job that carries a journal (the candidates of the
    ``waiting`` filter, see :mod:`durabl.stores.waiting`)."""

    equal: Callable[[str, str], str]
    bound: str
    instant: Callable[[datetime], Any]
    by_finish: str
    newest_first: str
    walk: str
    probes: Mapping[tuple[bool, bool], str]
    row_matches: str
    search_bytes: Callable[[str], bytes | None]
    search_hi: Callable[[str | None], Any]
    has_journal: str


def default_order(selection: JobFilter, sql: FilterSql) -> str:
    """The order a list is read in unless sorted: the one its index serves."""
    return sql.by_finish if lists_by_finish(selection) else sql.newest_first


def listed(selection: JobFilter, sql: FilterSql) -> tuple[list[str], dict[str, Any]]:
    """The list's tests (every filter but the search) and their parameters."""
    params: dict[str, Any] = selection.equal_fields()
    clauses = [sql.equal(name, value) for name, value in params.items()]
    for name, column, op, value in selection.ranges():  # names from JobFilter, not input
        clauses.append(sql.bound.format(column=column, op=op, name=name))
        params[name] = sql.instant(value)
    if selection.waiting:
        clauses.append(sql.has_journal)
    return clauses, params


def walk(template: str, clauses: list[str], selection: JobFilter, sql: FilterSql) -> str:
    """``template`` (a walk of the list's first jobs) over the list's tests ``clauses``."""
    tests = " AND ".join(clauses) or "true"
    return template.replace("{listed}", tests).replace("{own}", default_order(selection, sql))


def where_clause(
    selection: JobFilter, sql: FilterSql, newest: int | None = None, *, walked: bool = False
) -> tuple[str, dict[str, Any]]:
    """A WHERE clause and its parameters. ``search`` is a prefix of the job id or of the
    dedupe key, or text in the failure reason, compared byte for byte (case-sensitive, no
    wildcards); ``newest``: only among that many of the first jobs of the list in its own
    order (a walk of the list's index: the search tests each row walked, no probes, no
    sort of the whole list); ``walked``: the statement reads those jobs itself, so the
    WHERE tests the search alone."""
    clauses, params = listed(selection, sql)
    if newest is not None:
        params["newest"] = newest
        clauses = [] if walked else [walk(sql.walk, clauses, selection, sql)]
    search = selection.search
    if search:
        prefix = sql.search_bytes(search)
        if prefix is None:
            return "false", params
        bound = prefix_upper_bound(search)
        if newest is not None:
            clauses.append(sql.row_matches)
        else:
            clauses.append(sql.probes[bound is not None, "status" in params])
        params.update(search=search, search_len=len(prefix), search_bytes=prefix)
        params["search_hi"] = sql.search_hi(bound)
    return (" AND ".join(clauses) or "true"), params


class SqlReads(SqlWrites[C]):
    """The reads of a SQL store: jobs, listings, counts, stats and the admin overview's."""

    #: The SQL text of a listing filter's parts.
    filter_sql: FilterSql
    #: How many types a statement of :meth:`_types_stats` and :meth:`_activity_candidates`
    #: reads (None: any number, as arrays).
    types_per_statement: int | None = None

    # -- the dialect's hooks --------------------------------------------------------------
    @abstractmethod
    def _jobs(self, tx: C, rows: list[Any]) -> list[Job[Any]]:
        """The jobs ``rows`` hold, with their logs."""

    @abstractmethod
    def _from_instant(self, value: Any) -> datetime:
        """An instant column read back, as aware UTC."""

    def _where(self, filters: JobFilter, newest: int | None = None) -> Reading:
        """A listing filter's clause and its parameters (see :meth:`find_jobs`)."""
        return where_clause(filters, self.filter_sql, newest)

    @abstractmethod
    def listing_statement(self, filters: JobFilter, page: JobPage) -> Reading:
        """The SELECT of :meth:`find_jobs` (the job's columns) and its parameters."""

    @abstractmethod
    def _types_stats(self, types: Sequence[str], now: Any) -> tuple[str, str, dict[str, Any]]:
        """-> rows(type, status, n), -> rows(type, oldest, now), and their parameters."""

    @abstractmethod
    def _activity_counts(self, window: ActivityWindow, types: Sequence[str]) -> Reading:
        """-> rows(type, status, bucket, n): finished jobs per bucket, by finished_at."""

    @abstractmethod
    def _activity_candidates(self, window: ActivityWindow, types: Sequence[str]) -> Reading:
        """-> rows (:func:`wait_candidate`'s columns): the jobs that may have waited across
        a bucket's end (see :meth:`durabl.stores.base.Backend.read_activity`)."""

    # -- jobs and listings ----------------------------------------------------------------
    def get_job(self, job_id: str) -> Job[Any] | None:
        statement = self.sql.get_job

        def read(tx: C) -> Job[Any] | None:
            row = tx.execute(statement, {"id": job_id}).fetchone()
            return None if row is None else self._jobs(tx, [row])[0]

        return self._run("get_job", read, write=False, single=True)

    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        statement, params = self.listing_statement(filters, page)

        def read(tx: C) -> list[Job[Any]]:
            return self._jobs(tx, tx.execute(statement, params).fetchall())

        return self._run("list_jobs", read, write=False, single=True)

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        where, params = self._where(filters, newest)
        if at_most is None:
            statement = selecting(self.sql.count_jobs, where)
        else:
            statement = selecting(self.sql.count_jobs_at_most, where)
            params = {**params, "at_most": at_most}

        def read(tx: C) -> int:
            row = tx.execute(statement, params).fetchone()
            return 0 if row is None else int(row["n"])

        return self._run("count_jobs", read, write=False, single=True)

    # -- stats ----------------------------------------------------------------------------
    def get_stats(self, type: str | None = None) -> QueueStats:
        """Two statements: the counts, then the oldest due pending job and ``now``."""
        params = {"type": type, "now": self._now_param(), **STATUS_PARAMS}
        if type is None:
            counting, oldest = self.sql.stats_counts, self.sql.stats_oldest
        else:
            counting, oldest = self.sql.stats_counts_of_type, self.sql.stats_oldest_of_type

        def read(tx: C) -> QueueStats:
            counts: dict[str, int] = {}
            by_kind: dict[str, int] = {}
            for row in tx.execute(counting, params).fetchall():
                status, n = row["status"], int(row["n"])
                counts[status] = counts.get(status, 0) + n
                if status == "failed" and row["failure_kind"] is not None:
                    by_kind[row["failure_kind"]] = n
            found = tx.execute(oldest, params).fetchone()
            return stats_from_counts(counts, by_kind, self._oldest(found), self._at(found))

        return self._run("get_stats", read, write=False)

    def job_types(self) -> list[str]:
        statement = self.sql.job_types
        rows = self._run(
            "job_types", lambda tx: tx.execute(statement, {}).fetchall(), write=False, single=True
        )
        return [row["type"] for row in rows]

    def stats_by_type(self) -> dict[str, QueueStats]:
        """:meth:`get_stats` of every type: the types, failed jobs per type and kind, then
        per run of :attr:`types_per_statement` types their counts and oldest due jobs."""
        now = self._now_param()

        def read(tx: C) -> dict[str, QueueStats]:
            types = [row["type"] for row in tx.execute(self.sql.job_types, {}).fetchall()]
            if not types:
                return {}
            kinds: dict[str, dict[str, int]] = {}
            for row in tx.execute(self.sql.stats_by_type_kinds, {}).fetchall():
                kinds.setdefault(row["type"], {})[row["failure_kind"]] = int(row["n"])
            counts: dict[str, dict[str, int]] = {t: {} for t in types}
            oldest: dict[str, Any] = {}
            for run in chunked(types, self.types_per_statement):
                counting, oldest_due, params = self._types_stats(run, now)
                for row in tx.execute(counting, params).fetchall():
                    if row["n"]:
                        counts[row["type"]][row["status"]] = int(row["n"])
                for row in tx.execute(oldest_due, params).fetchall():
                    oldest[row["type"]] = row
            return {
                t: stats_from_counts(
                    counts[t], kinds.get(t, {}), self._oldest(oldest[t]), self._at(oldest[t])
                )
                for t in types
            }

        return self._run("stats_by_type", read, write=False)

    def _oldest(self, row: Any) -> datetime | None:
        return None if row["oldest"] is None else self._from_instant(row["oldest"])

    def _at(self, row: Any) -> datetime:
        return self._from_instant(row["now"])

    # -- the admin's overview -------------------------------------------------------------
    def find_activity(self, window: ActivityWindow, types: tuple[str, ...]) -> ActivityRead:
        """The counts per bucket, then the lag line's candidates (one statement per run
        of :attr:`types_per_statement` types), in one read transaction."""
        counting, counting_params = self._activity_counts(window, types)
        runs = chunked(types, self.types_per_statement)
        candidates_of = [self._activity_candidates(window, run) for run in runs]

        def read(tx: C) -> ActivityRead:
            counts = {
                (row["type"], row["status"], int(row["bucket"])): int(row["n"])
                for row in tx.execute(counting, counting_params).fetchall()
            }
            candidates = tuple(
                wait_candidate(row, self._from_instant)
                for statement, params in candidates_of
                for row in tx.execute(statement, params).fetchall()
            )
            return ActivityRead(counts, candidates)

        return self._run("read_activity", read, write=False)
