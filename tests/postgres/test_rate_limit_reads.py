"""PostgreSQL rate limits cost a claim nothing for a type without a limit: the claim is its
one statement, and the type's row is read only once the store object knows of a limit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from durabl.model.options import build_new_job
from durabl.stores.postgres import PostgresJobQueue
from durabl.stores.sql import rates
from tests.conftest import drop_postgres_tables


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresJobQueue]:
    table = f"t_{uuid.uuid4().hex[:10]}"
    backend = PostgresJobQueue(pg_url, table=table)
    backend.startup()
    yield backend
    backend.close()
    drop_postgres_tables(table)


@pytest.fixture
def window_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The types whose window a claim read."""
    seen: list[str] = []
    real = rates.allowance

    def allowance(cur: Any, rs: Any, type: str, now: Any, **kw: Any) -> Any:
        seen.append(type)
        return real(cur, rs, type, now, **kw)

    monkeypatch.setattr(rates, "allowance", allowance)
    return seen


def add(store: PostgresJobQueue, n: int) -> None:
    assert store.enqueue(build_new_job("t", {"n": n}, now=store.now())).job_id is not None


def test_claims_of_a_type_without_a_rate_limit_read_no_window(
    store: PostgresJobQueue, window_reads: list[str]
) -> None:
    for n in range(3):
        add(store, n)
    for _ in range(4):  # three claims and one empty poll
        store.claim("t")
    assert window_reads == []


def test_a_limit_set_through_the_store_object_applies_to_its_next_claim(
    store: PostgresJobQueue, window_reads: list[str]
) -> None:
    store.claim("t")  # the list of limited types is read: none
    store.set_rate_limit("t", 1, 86400)
    for n in range(3):
        add(store, n)
    assert len(store.claim("t", limit=3)) == 1
    assert store.claim("t", limit=3) == []
    assert "t" in window_reads
    store.set_rate_limit("t", None)
    assert len(store.claim("t", limit=3)) == 2
