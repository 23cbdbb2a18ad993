"""A store outage is one WARNING line when it starts and one INFO line when it ends, per
place that meets it (a type's poller, a pool's heartbeats, the registry refresh), not an
ERROR with a chained traceback for every failed claim. Only an error durabl did not expect
keeps its traceback."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue, MemoryBackend
from durabl.model.exceptions import BackendUnavailableError, DurablError
from durabl.model.job import JobHandle
from durabl.model.workers import WorkerInfo
from durabl.runtime.outages import OutageLog
from durabl.runtime.presence import Presence
from durabl.testing import FakeClock, wait_until

DOWN = "PostgreSQL unavailable at postgresql://db/app during claim: terminating connection"


def down() -> BackendUnavailableError:
    return BackendUnavailableError(DOWN)


class FlakyStore(MemoryBackend):
    """A memory store whose claims, heartbeats or registry writes fail with
    ``BackendUnavailableError`` the first ``failures`` times (per operation)."""

    def __init__(self, *, claims: int = 0, heartbeats: int = 0, refreshes: int = 0) -> None:
        super().__init__()
        self.left = {"claim": claims, "heartbeat": heartbeats, "upsert_worker": refreshes}
        self.calls = {"claim": 0, "heartbeat": 0, "upsert_worker": 0}
        self._lock = threading.Lock()

    def _maybe_fail(self, operation: str) -> None:
        with self._lock:
            self.calls[operation] += 1
            if self.left[operation] > 0:
                self.left[operation] -= 1
                raise down()

    def claim(self, type: str, **options: Any) -> list[JobHandle[Any]]:
        self._maybe_fail("claim")
        return super().claim(type, **options)

    def heartbeat(self, job_id: str, token: str, **options: Any) -> Any:
        self._maybe_fail("heartbeat")
        return super().heartbeat(job_id, token, **options)

    def upsert_worker(self, info: WorkerInfo) -> None:
        self._maybe_fail("upsert_worker")
        super().upsert_worker(info)


@pytest.fixture
def caplog_debug(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="durabl"):
        yield caplog


def records(caplog: pytest.LogCaptureFixture, logger: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.levelno == level]


def test_an_outage_is_one_warning_without_traceback_then_one_line_when_it_is_over(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    log = OutageLog(logging.getLogger("durabl.test"), "claiming report jobs", ("claim", "claims"))
    log.clock = clock
    for _ in range(41):
        log.failed(down())
        clock.advance(0.3)
    log.succeeded()
    log.succeeded()  # nothing more to say

    (warning,) = records(caplog_debug, "durabl.test", logging.WARNING)
    assert warning.exc_info is None
    assert warning.getMessage().startswith(
        f"claiming report jobs failed: BackendUnavailableError: {DOWN}"
    )
    assert "\n" not in warning.getMessage()
    (recovered,) = records(caplog_debug, "durabl.test", logging.INFO)
    assert recovered.getMessage() == (
        "claiming report jobs works again after 12.3 s; 41 claims failed meanwhile"
    )
    assert len(records(caplog_debug, "durabl.test", logging.DEBUG)) == 40  # the repeats
    assert not log.failing


def test_an_unexpected_error_keeps_its_traceback_once_and_a_new_error_gets_its_own_line(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    log = OutageLog(logging.getLogger("durabl.test"), "sweeping", ("sweep", "sweeps"))
    for _ in range(3):
        log.failed(KeyError("a bug"))
    log.failed(DurablError("MongoDB error during reap: not authorized (code 13)"))
    log.failed(down())
    log.failed(down())

    errors = records(caplog_debug, "durabl.test", logging.ERROR)
    assert [r.exc_info is not None for r in errors] == [True, False]  # the bug, the refusal
    assert "not authorized (code 13)" in errors[1].getMessage()
    (warning,) = records(caplog_debug, "durabl.test", logging.WARNING)
    assert "with another error" in warning.getMessage()
    log.succeeded()
    (recovered,) = records(caplog_debug, "durabl.test", logging.INFO)
    assert "6 sweeps failed meanwhile" in recovered.getMessage()


def test_a_poller_whose_claims_fail_logs_one_warning_and_one_recovery_line(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    store = FlakyStore(claims=5)
    queue = JobQueue(store)
    ran = threading.Event()
    queue.enqueue("report", {})
    try:
        queue.process("report", lambda job, ctx: ran.set(), poll_interval=0.01)
        assert ran.wait(10), "the job never ran once the store was back"
        assert wait_until(
            lambda: records(caplog_debug, "durabl.runtime.worker", logging.INFO), timeout=5
        )
    finally:
        queue.shutdown(timeout=5)
    assert store.calls["claim"] > 5
    logged = [r for r in caplog_debug.records if r.name == "durabl.runtime.worker"]
    above_debug = [r for r in logged if r.levelno > logging.DEBUG]
    assert [r.levelno for r in above_debug] == [logging.WARNING, logging.INFO], [
        r.getMessage() for r in above_debug
    ]
    warning, recovered = above_debug
    assert warning.exc_info is None and DOWN in warning.getMessage()
    assert warning.getMessage().startswith("claiming report jobs failed")
    assert getattr(warning, "type", None) == "report"
    assert "5 claims failed meanwhile" in recovered.getMessage()
    assert all(r.exc_info is None for r in logged)


def test_the_heartbeats_of_a_pool_share_one_outage_line(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    store = FlakyStore(heartbeats=6)
    queue = JobQueue(store, visibility_timeout=30)
    release = threading.Event()
    started = threading.Semaphore(0)

    def hold(job: Job[Any], ctx: JobContext) -> None:
        started.release()
        release.wait(20)

    for n in range(2):
        queue.enqueue("report", {"n": n})
    try:
        queue.process("report", hold, concurrency=2, poll_interval=0.01, heartbeat_interval=0.02)
        assert started.acquire(timeout=10) and started.acquire(timeout=10)
        assert wait_until(
            lambda: records(caplog_debug, "durabl.runtime.heartbeat", logging.INFO), timeout=10
        ), "the renewals never recovered"
    finally:
        release.set()
        queue.shutdown(timeout=5)
    logged = [r for r in caplog_debug.records if r.name == "durabl.runtime.heartbeat"]
    above_debug = [r for r in logged if r.levelno > logging.DEBUG]
    assert [r.levelno for r in above_debug] == [logging.WARNING, logging.INFO], [
        r.getMessage() for r in above_debug
    ]
    assert "6 renewals failed meanwhile" in above_debug[1].getMessage()
    assert all(r.exc_info is None for r in logged)


def test_a_registry_refresh_that_fails_is_one_line_until_it_works_again(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    store = FlakyStore(refreshes=3)
    entry = Presence(store, processors=list, active=lambda: 0, default_interval=10.0)
    assert [entry.beat() for _ in range(4)] == [False, False, False, True]
    logged = [r for r in caplog_debug.records if r.name == "durabl.runtime.presence"]
    above_debug = [r for r in logged if r.levelno > logging.DEBUG]
    assert [r.levelno for r in above_debug] == [logging.WARNING, logging.INFO]
    assert above_debug[0].exc_info is None
    assert "3 refreshes failed meanwhile" in above_debug[1].getMessage()
