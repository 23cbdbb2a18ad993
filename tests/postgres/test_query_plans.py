"""The sorts INDEXED_ORDERS names are read from an index on PostgreSQL: with sorting made
prohibitively dear (``enable_sort = off``), the planner still finds a plan without a Sort
of the whole list, which it can only do when an index gives the order. A sort that no
index serves keeps its Sort (the control: the check can fail). A listing reads its page's
keys first, then those rows: the top of every plan is a Sort of the page's rows alone, and
the check is of the plan below it."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from durabl.model.options import build_new_job
from durabl.model.rules import INDEXED_ORDERS, JobPage, job_filter, job_order, served_by_index
from tests.conftest import postgres_url
from tests.contract.support import claim_one, enqueue_id

# "Sort" as a plan node; an "Incremental Sort" (ties among equal keys only) is no full sort.
FULL_SORT = re.compile(r"^\s*(->\s*)?Sort  \(cost", re.MULTILINE)


def plan(pg: Any, order: str | None, **filters: Any) -> str:
    statement, values = pg.listing_statement(
        job_filter(filters), JobPage(limit=50, order=job_order(order))
    )
    with psycopg.connect(postgres_url()) as conn:
        conn.execute("SET LOCAL enable_sort = off")
        rows = conn.execute("EXPLAIN " + statement, values).fetchall()  # type: ignore[arg-type]
    top, *below = [row[0] for row in rows]
    assert FULL_SORT.match(top), top  # the page's rows, read by their keys, in order
    return "\n".join(below)


@pytest.fixture
def filled(pg: Any) -> Any:
    for n in range(30):
        enqueue_id(pg, data={"n": n})
    for _ in range(10):
        claim_one(pg).fail_fatal("no")
    for _ in range(10):
        claim_one(pg).complete()
    return pg


@pytest.mark.parametrize(
    ("status", "field"),
    [(status, field) for status, fields in INDEXED_ORDERS.items() for field in fields],
)
@pytest.mark.parametrize("descending", [False, True])
def test_an_indexed_order_is_read_from_an_index(
    filled: Any, status: str, field: str, descending: bool
) -> None:
    order = ("-" if descending else "") + field
    found = plan(filled, order, status=status)
    assert not FULL_SORT.search(found), found


@pytest.mark.parametrize("status", ["pending", "failed", "completed", "cancelled"])
def test_a_list_in_its_own_order_is_read_from_an_index(filled: Any, status: str) -> None:
    found = plan(filled, None, status=status)
    assert not FULL_SORT.search(found), found


def test_an_order_no_index_serves_sorts_the_list(filled: Any) -> None:
    assert not served_by_index("failed", "created_at")
    assert FULL_SORT.search(plan(filled, "created_at", status="failed"))


@pytest.mark.parametrize("paused", [False, True])
def test_a_claim_is_planned_by_its_limit_however_long_the_backlog(pg: Any, paused: bool) -> None:
    """A claim takes a few jobs off a long backlog: its plan must cost what reading that
    many index entries costs, not what the whole backlog's scan costs. A plan costed as
    the whole scan passes ``jit_above_cost``, and PostgreSQL then JIT-compiles every claim
    (a second and a half each here, at 200,000 pending jobs): the paused types' check once
    made exactly that happen, as an anti-join on each row's type."""
    jobs = [build_new_job("plan", {"n": n}) for n in range(20_000)]
    for start in range(0, len(jobs), 1000):
        pg.insert_many(jobs[start : start + 1000])
    if paused:
        pg.pause_type("plan")
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f"ANALYZE {pg.tables.qualified()}")
        values = {"type": "plan", "now": None, "owner": "o", "limit": 8, "starting": 8}
        row = conn.execute(
            "EXPLAIN (FORMAT JSON) " + pg.sql.claim_due,  # type: ignore[arg-type]
            {**values, "kept": 10},
        ).fetchone()
        jit_above_cost = float(conn.execute("SHOW jit_above_cost").fetchone()[0])  # type: ignore[index]
    assert row is not None
    cost = row[0][0]["Plan"]["Total Cost"]
    assert cost < jit_above_cost / 10, f"a claim planned at cost {cost}"
