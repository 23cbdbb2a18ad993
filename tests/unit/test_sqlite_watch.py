"""The SQLite change check: jobs committed by another connection (another process) are
picked up within a few milliseconds, not at the next poll; an idle process checks rarely;
a failing check falls back to polling and recovers."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, SqliteJobQueue
from durabl.stores.push import WatcherThread
from durabl.stores.sqlite.watch import IDLE_AFTER, IDLE_FACTOR, THREAD_NAME, ChangeWatcher
from durabl.testing import wait_until
from tests.unit.test_changestream import FakeListener

TYPES = ("a", "b")


def test_a_commit_by_another_connection_wakes_every_processor(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    mine, theirs = SqliteJobQueue(path), SqliteJobQueue(path)
    listener = FakeListener(TYPES)
    watcher = mine.open_push(listener)
    # The first read sets the baseline and wakes everyone once, for whatever was committed
    # before it (a processor's first poll may have come just before).
    assert watcher.check_once() is True
    assert sorted(listener.due) == [("a", 0), ("b", 0)]  # 0: poll every free slot
    assert watcher.check_once() is False  # nothing committed since
    JobQueue(theirs).enqueue("a", {})
    assert watcher.check_once() is True
    assert sorted(listener.due) == [("a", 0), ("a", 0), ("b", 0), ("b", 0)]
    assert watcher.check_once() is False
    assert watcher.wakeups == 2
    assert listener.modes == []  # it never changes the processors' poll intervals


def test_a_job_from_another_process_starts_long_before_the_next_poll(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    workers = JobQueue(SqliteJobQueue(path))
    producer = JobQueue(SqliteJobQueue(path))  # its own connections, as another process
    started = threading.Event()
    try:
        workers.process("t", lambda job, ctx: started.set(), concurrency=2, poll_interval=3600)
        assert wait_until(lambda: workers.processors["t"].polls >= 1)  # the first, empty poll
        health = workers.is_healthy()
        assert health.pickup == "push" and "5 ms" in health.reason, health
        assert THREAD_NAME in {t.name for t in threading.enumerate()}
        producer.enqueue("t", {})
        assert started.wait(10), "the change check should wake the poller (poll is 1 h)"
    finally:
        workers.shutdown(5)
        producer.shutdown(5)
    assert THREAD_NAME not in {t.name for t in threading.enumerate()}


def test_without_the_change_check_pickup_is_by_polling(tmp_path: Path) -> None:
    backend = SqliteJobQueue(tmp_path / "q.db", change_check_interval=None)
    assert not backend.supports_push
    queue = JobQueue(backend)
    try:
        queue.process("t", lambda job, ctx: None, poll_interval=3600)
        assert queue.is_healthy().pickup == "poll"
        assert THREAD_NAME not in {t.name for t in threading.enumerate()}
    finally:
        queue.shutdown(5)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5ms", True])
def test_a_bad_change_check_interval_is_refused(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ValueError, match="change_check_interval"):
        SqliteJobQueue(tmp_path / "q.db", change_check_interval=bad)


def test_the_check_slows_down_once_the_file_is_quiet() -> None:
    now = [100.0]
    version = [1]
    watcher = ChangeWatcher(
        lambda: version[0], FakeListener(TYPES), interval=0.005, path="x", clock=lambda: now[0]
    )
    watcher.check_once()
    assert watcher.next_wait() == 0.005
    now[0] += IDLE_AFTER + 0.1
    assert not watcher.check_once()
    assert watcher.next_wait() == pytest.approx(0.005 * IDLE_FACTOR)
    version[0] += 1  # a commit: back to the short interval at once
    assert watcher.check_once()
    assert watcher.next_wait() == 0.005


def test_a_failing_check_is_reported_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    failing = threading.Event()
    failing.set()
    recovered = threading.Event()
    listener = FakeListener(TYPES)

    def probe() -> int:
        if failing.is_set():
            raise OSError("disk gone")
        recovered.set()
        return 7

    watcher = ChangeWatcher(probe, listener, interval=0.001, path="x.db")
    watcher.start()
    try:
        assert wait_until(lambda: watcher.status().details["errors"] >= 2)
        status = watcher.status()
        assert status.pickup == "poll" and "failing" in status.reason
        assert "checking SQLite file x.db for changes failed" in caplog.text
        failing.clear()
        assert recovered.wait(10)
        assert wait_until(lambda: watcher.status().pickup == "push")
    finally:
        assert watcher.stop(5)
    assert watcher.status().pickup == "poll"  # stopped
    assert sorted(listener.due) == [("a", 0), ("b", 0)]  # the first good read only


def test_the_watcher_stops_when_its_queue_closes() -> None:
    listener = FakeListener(TYPES)
    watcher = ChangeWatcher(lambda: 1, listener, interval=0.001, path="x.db")
    watcher.start()
    listener.closing = True
    assert wait_until(lambda: watcher.status().pickup == "poll")
    assert watcher.stop(5)


def test_a_watcher_whose_thread_is_gone_says_so() -> None:
    # After fork() a child holds the parent's watcher object but not its thread.
    watcher = ChangeWatcher(lambda: 1, FakeListener(TYPES), interval=0.001, path="x.db")
    watcher.start()
    assert watcher.status().pickup == "push"
    real = watcher._thread
    gone = WatcherThread(THREAD_NAME, lambda: None)  # a thread that is no longer alive
    gone.start()
    assert gone.stop(5)
    watcher._thread = gone
    try:
        assert watcher.status().pickup == "poll"
        assert "stopped" in watcher.status().reason
    finally:
        watcher._thread = real
        assert watcher.stop(5)
