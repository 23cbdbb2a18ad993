"""MongoDB flow control costs nothing per claim until a job with a concurrency key shows
up, and the key's limit holds from that first job on."""

from __future__ import annotations

from typing import Any

from durabl.model.options import build_new_job
from tests.conftest import make_mongomock_backend


def counting_aggregates(backend: Any) -> list[int]:
    calls = [0]
    real = backend.store.col.aggregate

    def aggregate(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    backend.store.col.aggregate = aggregate
    return calls


def test_claims_of_jobs_without_keys_send_no_per_key_count() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    calls = counting_aggregates(backend)
    for n in range(3):
        backend.enqueue(build_new_job("t", {"n": n}))
    for _ in range(4):  # three claims and one empty poll
        backend.claim("t")
    assert calls[0] == 0


def test_the_first_keyed_claim_still_keeps_its_key_to_the_limit() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    for n in range(3):
        backend.enqueue(build_new_job("t", {"n": n}, concurrency_key="k", concurrency_limit=1))
    calls = counting_aggregates(backend)
    first = backend.claim("t", limit=3)
    assert len(first) == 1  # the other two of key k are held back, not claimed
    assert backend.claim("t") == []
    assert calls[0] >= 1  # counted per claim from the first keyed job on
    first[0].complete()
    assert len(backend.claim("t")) == 1


def counting_rate_reads(backend: Any) -> list[str]:
    """The calls the store makes on its rate limits collection, by method name."""
    calls: list[str] = []
    real = backend._rates

    class Counting:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if not callable(attr):
                return attr

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return attr(*args, **kwargs)

            return counted

    backend._rates = Counting()
    return calls


def test_claims_of_a_type_without_a_rate_limit_read_no_rate_limit() -> None:
    backend = make_mongomock_backend()
    backend.startup()  # reads which types have a limit: none
    calls = counting_rate_reads(backend)
    for n in range(3):
        backend.enqueue(build_new_job("t", {"n": n}))
    for _ in range(4):  # three claims and one empty poll
        backend.claim("t")
    assert calls == []


def test_a_rate_limit_set_through_the_store_object_is_read_by_its_next_claim() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    calls = counting_rate_reads(backend)
    backend.set_rate_limit("t", 1, 60)
    for n in range(3):
        backend.enqueue(build_new_job("t", {"n": n}))
    assert len(backend.claim("t", limit=3)) == 1
    assert backend.claim("t", limit=3) == []
    assert "find_one" in calls
    backend.set_rate_limit("t", None)
    assert len(backend.claim("t", limit=3)) == 2
