"""The sorts INDEXED_ORDERS names are read from an index on SQLite: their query plan sorts
no more than the ties of equal keys ("FOR RIGHT PART OF ORDER BY"), never the whole list.
A sort that no index serves keeps its full sort (the control: the check can fail)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from durabl.model.rules import INDEXED_ORDERS, JobPage, job_filter, job_order, served_by_index
from durabl.stores.sqlite import queries
from durabl.stores.sqlite.backend import SqliteJobQueue
from tests.conftest import cleanup_backend, make_sqlite_backend
from tests.contract.support import claim_one, enqueue_id

FULL_SORT = "USE TEMP B-TREE FOR ORDER BY"


def plan(store: SqliteJobQueue, order: str | None, **filters: Any) -> list[str]:
    statement, params = queries.listing_statement(
        job_filter(filters), JobPage(limit=50, order=job_order(order))
    )
    with sqlite3.connect(store.path) as conn:
        return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, params)]


@pytest.fixture
def filled() -> Iterator[SqliteJobQueue]:
    store = make_sqlite_backend()
    store.startup()
    for n in range(30):
        enqueue_id(store, data={"n": n})
    for _ in range(10):
        claim_one(store).fail_fatal("no")
    for _ in range(10):
        claim_one(store).complete()
    yield store
    cleanup_backend(store)


@pytest.mark.parametrize(
    ("status", "field"),
    [(status, field) for status, fields in INDEXED_ORDERS.items() for field in fields],
)
@pytest.mark.parametrize("descending", [False, True])
def test_an_indexed_order_is_read_from_an_index(
    filled: SqliteJobQueue, status: str, field: str, descending: bool
) -> None:
    found = plan(filled, ("-" if descending else "") + field, status=status)
    assert FULL_SORT not in found, found
    assert any("USING INDEX" in step for step in found), found


@pytest.mark.parametrize("status", ["pending", "failed", "completed", "cancelled"])
def test_a_list_in_its_own_order_is_read_from_an_index(filled: SqliteJobQueue, status: str) -> None:
    assert FULL_SORT not in plan(filled, None, status=status)


def test_an_order_no_index_serves_sorts_the_list(filled: SqliteJobQueue) -> None:
    assert not served_by_index("failed", "created_at")
    assert FULL_SORT in plan(filled, "created_at", status="failed")


@pytest.mark.parametrize("descending", [False, True])
def test_the_pending_list_of_one_type_by_due_time_reads_an_index(
    filled: SqliteJobQueue, descending: bool
) -> None:
    found = plan(filled, ("-" if descending else "") + "run_at", status="pending", type="t")
    assert FULL_SORT not in found, found
