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
