"""Flow control as per-type defaults (``process(...)`` / ``@durabl.job`` options): the
type's concurrency key (a constant, or a callable of the payload) and limit apply to every
enqueue that gives none; its rate limit is stored when its workers start."""

from __future__ import annotations

from typing import Any

from durabl import JobQueue, MemoryBackend
from durabl.model.flow import RateLimit
from durabl.testing import FakeClock


def nothing(job: Any, ctx: Any) -> None:
    return None


def claimed(queue: JobQueue, type: str) -> list[Any]:
    return [h.data for h in queue.backend.claim(type, limit=10, lease_owner="t")]


def test_a_callable_key_of_the_payload_applies_to_every_enqueue() -> None:
    queue = JobQueue(MemoryBackend(clock=FakeClock()))
    queue.register(
        "sync", nothing, concurrency_key=lambda data: f"customer:{data['c']}", concurrency_limit=1
    )
    for n, c in enumerate([1, 1, 2, 2]):
        queue.enqueue("sync", {"c": c, "n": n})
    assert claimed(queue, "sync") == [{"c": 1, "n": 0}, {"c": 2, "n": 2}]
    assert claimed(queue, "sync") == []


def test_a_callable_returning_none_means_no_key() -> None:
    queue = JobQueue(MemoryBackend(clock=FakeClock()))
    queue.register("sync", nothing, concurrency_key=lambda data: None)
    for n in range(3):
        queue.enqueue("sync", {"n": n})
    assert len(claimed(queue, "sync")) == 3


def test_a_constant_key_caps_the_type_and_an_explicit_key_wins() -> None:
    queue = JobQueue(MemoryBackend(clock=FakeClock()))
    queue.register("report", nothing, concurrency_key="reports", concurrency_limit=2)
    for n in range(4):
        queue.enqueue("report", {"n": n})
    queue.enqueue("report", {"n": 9}, concurrency_key="elsewhere")
    assert [d["n"] for d in claimed(queue, "report")] == [0, 1, 9]


def test_a_declared_rate_limit_is_stored_when_workers_start() -> None:
    queue = JobQueue(MemoryBackend(clock=FakeClock()))
    queue.process("sms", nothing, rate_limit=(5, 2))
    try:
        assert queue.get_rate_limit("sms") == RateLimit(5, 2.0)
    finally:
        queue.shutdown(5)
