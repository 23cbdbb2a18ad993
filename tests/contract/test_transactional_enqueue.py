"""``enqueue(connection=...)`` on every store: a store without transactional enqueue refuses
it with a ``ValueError`` naming the option and writes nothing; PostgreSQL takes an open
psycopg connection and refuses anything else with a ``TypeError``. (What the transaction
then guarantees is proven on the real server in ``tests/postgres``.)"""

from __future__ import annotations

import pytest

from durabl import JobQueue
from durabl.stores.base import Backend


def test_a_store_without_transactional_enqueue_refuses_a_connection(
    backend: Backend, queue: JobQueue
) -> None:
    if backend.supports_transactional_enqueue:
        pytest.skip(f"{type(backend).__name__} enqueues through a caller's connection")
    with pytest.raises(ValueError, match=r"connection=") as refused:
        queue.enqueue("t", {}, connection=object())
    assert type(backend).__name__ in str(refused.value)
    assert queue.count_jobs() == 0


def test_a_connection_of_the_wrong_kind_is_a_type_error(backend: Backend, queue: JobQueue) -> None:
    if not backend.supports_transactional_enqueue:
        pytest.skip(f"{type(backend).__name__} has no transactional enqueue")
    with pytest.raises(TypeError, match=r"connection= must be"):
        queue.enqueue("t", {}, connection=object())
    assert queue.count_jobs() == 0


def test_a_store_declares_whether_it_enqueues_through_a_connection(backend: Backend) -> None:
    expected = type(backend).__name__ == "PostgresJobQueue"
    assert backend.supports_transactional_enqueue is expected
