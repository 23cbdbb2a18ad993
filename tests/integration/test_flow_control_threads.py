"""Flow control under many worker threads in one process, on the stores that take
threads (mongomock is not thread-safe; MongoDB runs when a server is reachable): several
keys at once, never more than a key's limit running, every job run exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from durabl import JobQueue
from durabl.testing import wait_until
from tests.conftest import cleanup_backend, make_backend

LIMITS = {"k0": 1, "k1": 1, "k2": 2, "k3": 3}


@pytest.fixture(params=["memory", "sqlite", "postgres", "mongodb"])
def queue(request: pytest.FixtureRequest) -> Iterator[JobQueue]:
    backend = make_backend(request.param)
    backend.startup()
    q = JobQueue(backend)
    yield q
    q.shutdown(10)
    cleanup_backend(backend)


def test_many_threads_never_exceed_a_keys_limit(queue: JobQueue) -> None:
    lock = threading.Lock()
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    runs: Counter[int] = Counter()
    pause = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        key = job.data["key"]
        with lock:
            running[key] += 1
            most[key] = max(most[key], running[key])
            runs[job.data["n"]] += 1
        pause.wait(0.005)  # long enough for other threads to try the same key
        with lock:
            running[key] -= 1

    total = 160
    for n in range(total):
        key = f"k{n % 4}"
        queue.enqueue("t", {"key": key, "n": n}, concurrency_key=key, concurrency_limit=LIMITS[key])
    for n in range(20):  # jobs without a key run beside them
        queue.enqueue("t", {"key": "none", "n": total + n})
    queue.process("t", handler, concurrency=12, poll_interval=0.01)
    assert wait_until(lambda: queue.count_jobs(status="completed") == total + 20, timeout=60)
    assert runs == Counter(range(total + 20))  # each exactly once
    for key, limit in LIMITS.items():
        assert most[key] <= limit, (key, most[key])
    assert sum(most.values()) > 4  # the keys did run side by side
    assert queue.count_jobs(status="pending") == 0
