"""After failed claims a poller backs off, but while the store is unavailable by about a
second at most: the first claim after the store's return comes within about a second of
it, push pickup or not. Each failed claim already waited for the store before it failed,
so a longer wait would only add delay; a floor keeps a store that fails at once from
being asked in a tight loop. An error that is not an outage (the store refused the claim)
keeps the long backoff.

The poller used to wait the poll interval doubled per error, up to 30 s: with push off,
the first job ran 15.7 s after PostgreSQL returned from a 40 s outage."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from durabl import JobQueue, MemoryBackend
from durabl.model.exceptions import BackendUnavailableError, DurablError
from durabl.model.job import JobHandle
from durabl.runtime.pacing import (
    ERROR_BACKOFF_MAX,
    ERROR_BACKOFF_MIN,
    POLL_JITTER,
    UNAVAILABLE_BACKOFF_MAX,
    next_poll_wait,
)
from durabl.testing import wait_until

#: Scheduling on a busy two-core machine.
SLACK = 0.5


class DownStore(MemoryBackend):
    """A memory store whose claims fail at once while :attr:`down` is set (with
    ``error``), as a refused connection does; counts the claims."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.down = threading.Event()
        self.claims = 0

    def claim(self, type: str, **options: Any) -> list[JobHandle[Any]]:
        self.claims += 1
        if self.down.is_set():
            raise self.error
        return super().claim(type, **options)


def test_the_first_claim_after_the_store_returns_comes_within_about_a_second() -> None:
    store = DownStore(BackendUnavailableError("PostgreSQL unavailable during claim"))
    queue = JobQueue(store)
    ran = threading.Event()
    store.down.set()
    try:
        # A long poll interval, and no push on this store: only the backoff brings it back.
        queue.process("t", lambda job, ctx: ran.set(), poll_interval=5)
        queue.enqueue("t", {})  # wakes the poller: its claim fails
        assert wait_until(lambda: store.claims >= 1, timeout=5)
        threading.Event().wait(3.0)  # the outage, not a synchronisation
        claims = store.claims
        store.down.clear()
        up = time.monotonic()
        assert ran.wait(15), "the job never ran"
        took = time.monotonic() - up
    finally:
        queue.shutdown(timeout=5)
    assert took < UNAVAILABLE_BACKOFF_MAX + SLACK, f"ran {took:.2f} s after the store returned"
    # A failed claim every second or so while it was down, not a tight loop.
    assert claims <= 6, f"{claims} claims in 3 s"


def test_a_store_that_fails_at_once_is_not_asked_in_a_tight_loop() -> None:
    store = DownStore(BackendUnavailableError("MongoDB unavailable during claim"))
    queue = JobQueue(store)
    store.down.set()
    try:
        queue.process("t", lambda job, ctx: None, poll_interval=0.01)
        assert wait_until(lambda: store.claims >= 1, timeout=5)
        first = store.claims
        threading.Event().wait(2.0)
        claims = store.claims - first
    finally:
        queue.shutdown(timeout=5)
    # 0.1 s at least between tries, doubling to about a second: a dozen or so in 2 s.
    assert claims <= 14, f"{claims} claims in 2 s"


@pytest.mark.parametrize("interval", [0.01, 0.5, 5.0, 60.0])
def test_backoff_while_unavailable_stays_between_the_floor_and_about_a_second(
    interval: float,
) -> None:
    for errors in range(1, 40):
        for rand in (0.0, 0.5, 0.999):
            wait = next_poll_wait(interval, errors, True, rand)
            assert ERROR_BACKOFF_MIN * (1 - POLL_JITTER) <= wait <= UNAVAILABLE_BACKOFF_MAX


def test_a_refused_claim_keeps_the_long_backoff_and_a_healthy_one_the_interval() -> None:
    assert next_poll_wait(5.0, 10, False, 0.0) == ERROR_BACKOFF_MAX
    assert next_poll_wait(5.0, 1, False, 0.0) == 10.0
    assert next_poll_wait(5.0, 0, False, 0.5) == 5.0


def test_a_refused_claim_is_retried_later_than_an_outage() -> None:
    store = DownStore(DurablError("PostgreSQL error during claim: permission denied"))
    queue = JobQueue(store)
    store.down.set()
    try:
        queue.process("t", lambda job, ctx: None, poll_interval=2.0)
        assert wait_until(lambda: store.claims >= 1, timeout=5)
        threading.Event().wait(1.5)
        claims = store.claims
    finally:
        queue.shutdown(timeout=5)
    assert claims == 1  # the next one comes 3.2-4 s after the first (the interval doubled)
