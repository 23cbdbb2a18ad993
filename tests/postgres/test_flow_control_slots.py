"""PostgreSQL's guard for concurrency keys: the unique index on (key, slot) over active
jobs refuses a second holder of a slot, and a claim that loses the race for a key's last
slot is repeated rather than failing the poll."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durabl.model.options import build_new_job
from durabl.stores.postgres import PostgresJobQueue
from tests.conftest import drop_postgres_tables


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresJobQueue]:
    table = f"t_{uuid.uuid4().hex[:10]}"
    backend = PostgresJobQueue(pg_url, table=table)
    backend.startup()
    yield backend
    backend.close()
    drop_postgres_tables(table)


def add(store: PostgresJobQueue, key: str, n: int) -> str:
    job = build_new_job("t", {"n": n}, concurrency_key=key, now=store.now())
    job_id = store.enqueue(job).job_id
    assert job_id is not None
    return job_id


def test_the_index_refuses_a_second_active_holder_of_a_slot(
    store: PostgresJobQueue, pg_url: str
) -> None:
    first, second = add(store, "k", 1), add(store, "k", 2)
    (handle,) = store.claim("t", limit=5)
    assert handle.id == first
    with psycopg.connect(pg_url, autocommit=True) as conn:
        slot = conn.execute(
            f"SELECT concurrency_slot FROM {store.table} WHERE id = %s", (first,)
        ).fetchone()
        assert slot == (0,)
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                f"UPDATE {store.table} SET status = 'active', concurrency_slot = 0 WHERE id = %s",
                (second,),
            )


def test_a_claim_that_lost_the_last_slot_claims_again(
    store: PostgresJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(store, "k", 1)
    real = store._claim_in  # the race is made by hand here
    calls: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise psycopg.errors.UniqueViolation("another claimer took the slot")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "_claim_in", racing)
    handles = store.claim("t", limit=5)
    assert len(handles) == 1
    assert len(calls) == 2
