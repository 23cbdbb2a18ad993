"""PostgreSQL's guard for concurrency keys: the unique index on (key, slot) over active
jobs refuses a second holder of a slot, and a claim that loses the race for a key's last
slot is repeated rather than failing the poll."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durabl.model.options import build_new_job
from durabl.stores.postgres import PostgresJobQueue
from durabl.testing import wait_until
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


def test_a_claims_stored_start_can_precede_the_end_it_waited_for(
    store: PostgresJobQueue, pg_url: str
) -> None:
    """Why the cross-process test reads the handlers' own clocks, not the attempt history:
    a claim's ``claimed_at`` is its transaction's ``now()``, fixed when the transaction
    starts, and the claim may then wait (here on the rate limit's row lock; on a busy host,
    for the CPU) while the run holding the key ends. The claims never overlapped: the
    second took the key only after the first had freed it. But the stored times say the
    second started before the first ended, an overlap that is neither a double claim nor
    a lost lease."""
    store.set_rate_limit("t", 100, 86400)  # the claim locks the type's row
    first_id, second_id = add(store, "k", 1), add(store, "k", 2)
    (first,) = store.claim("t", limit=5)
    assert first.id == first_id
    claimed: list[Any] = []
    with psycopg.connect(pg_url) as lock:
        lock.execute(f"SELECT 1 FROM {store.table}_rate_limits WHERE type = 't' FOR UPDATE")
        waiting = threading.Thread(target=lambda: claimed.extend(store.claim("t", limit=5)))
        waiting.start()
        with psycopg.connect(pg_url, autocommit=True) as watch:
            assert wait_until(
                lambda: (
                    watch.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE %s",
                        (f"%{store.table}_rate_limits%FOR UPDATE%",),
                    ).fetchone()
                    == (1,)
                ),
                timeout=10,
            )
        first.complete()  # frees the key while the second claim waits
        lock.commit()
    waiting.join(10)
    assert [h.id for h in claimed] == [second_id]  # it took the key the first had freed
    claimed[0].complete()
    (first_run,) = store.get_job(first_id).attempt_history  # type: ignore[union-attr]
    (second_run,) = store.get_job(second_id).attempt_history  # type: ignore[union-attr]
    assert first_run.ended_at is not None
    assert second_run.started_at < first_run.ended_at
