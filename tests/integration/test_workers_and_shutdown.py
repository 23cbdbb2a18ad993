"""Real threads: pools, pickup, graceful shutdown, signal handlers."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from durabl import (
    Job,
    JobContext,
    JobEvent,
    JobQueue,
    MemoryBackend,
    MongoJobQueue,
    QueueShutdownError,
)
from durabl.stores.base import Backend
from durabl.testing import wait_until
from tests.conftest import cleanup_backend, make_backend


def durabl_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("durabl-"))


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture(params=["mongomock", "mongodb"])
def q(request: pytest.FixtureRequest, events: list[JobEvent]) -> Any:
    """A queue on the real clock: mongomock, and a real MongoDB when one is reachable."""
    backend = make_backend(request.param)
    queue = JobQueue(backend, visibility_timeout=30, on_job_event=events.append)
    yield queue
    queue.shutdown(2)
    cleanup_backend(backend)


def test_threads_are_named_and_all_joined_on_shutdown(q: JobQueue) -> None:
    q.process("mail", lambda job, ctx: None, concurrency=3, poll_interval=0.05)
    q.start_reaper(interval=0.05)
    names = durabl_threads()
    assert "durabl-poller-mail" in names and "durabl-reaper" in names
    assert {f"durabl-worker-mail-{n}" for n in range(3)} <= set(names)
    q.shutdown(2)
    assert durabl_threads() == []


def test_one_poller_claims_for_the_whole_pool(q: JobQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    callers: list[str] = []
    real_claim = q.backend.claim

    def spy(*args: Any, **kwargs: Any) -> Any:
        callers.append(threading.current_thread().name)
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(q.backend, "claim", spy)
    q.process("t", lambda job, ctx: None, concurrency=8, poll_interval=0.02)
    assert wait_until(lambda: len(callers) >= 5)
    assert set(callers) == {"durabl-poller-t"}


def test_enqueue_wakes_the_local_poller_at_once(q: JobQueue) -> None:
    ran = threading.Event()
    q.process("t", lambda job, ctx: ran.set(), poll_interval=3600)
    assert wait_until(lambda: q.processors["t"].polls >= 1)  # first, empty poll done
    q.enqueue("t", {})
    assert ran.wait(10), "an enqueue in this process should wake its poller"


def test_pool_runs_jobs_concurrently_up_to_its_size(q: JobQueue) -> None:
    gate = threading.Event()
    running = threading.Semaphore(0)

    def handler(job: Job[Any], ctx: JobContext) -> None:
        running.release()
        gate.wait(10)

    q.process("t", handler, concurrency=3, poll_interval=0.02)
    for n in range(5):
        q.enqueue("t", {"n": n})
    for _ in range(3):
        assert running.acquire(timeout=10)
    assert not running.acquire(timeout=0.2)  # a fourth cannot start while three run
    assert q.get_stats("t").active == 3
    gate.set()
    assert wait_until(lambda: q.get_stats("t").completed == 5)


def test_shutdown_waits_for_runs_that_finish_in_time(q: JobQueue) -> None:
    started = threading.Event()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        started.set()
        ctx.signal.wait(0.3)

    q.process("t", handler, poll_interval=0.02)
    q.enqueue("t", {})
    assert started.wait(10)
    q.shutdown(timeout=10)
    assert q.get_stats("t").completed == 1


def test_shutdown_aborts_and_releases_runs_past_the_timeout(
    q: JobQueue, events: list[JobEvent]
) -> None:
    started = threading.Event()
    aborted: list[str | None] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        started.set()
        ctx.signal.wait(30)
        aborted.append(ctx.signal.reason)

    q.process("t", handler, poll_interval=0.02)
    q.enqueue("t", {}, max_attempts=1)
    assert started.wait(10)
    q.shutdown(timeout=0.2)
    assert q.draining is not None and q.draining.done()
    (job,) = q.list_jobs()
    assert (job.status, job.attempts) == ("pending", 0)  # released, attempt refunded
    assert [e.op for e in events if e.kind == "shutdown-released"] == ["released"]
    assert wait_until(lambda: aborted == ["shutdown"])
    assert durabl_threads() == []


def test_shutdown_supersedes_when_a_follower_blocks_release(q: JobQueue) -> None:
    started = threading.Event()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        started.set()
        ctx.signal.wait(30)

    q.process("t", handler, poll_interval=0.02)
    q.enqueue("t", {"v": 1}, dedupe_key="k", dedupe_scope="pending")
    assert started.wait(10)
    q.enqueue("t", {"v": 2}, dedupe_key="k", dedupe_scope="pending")
    q.shutdown(timeout=0.1)
    assert sorted(j.status for j in q.list_jobs()) == ["pending", "superseded"]


def test_a_stuck_handler_cannot_hold_shutdown(q: JobQueue) -> None:
    release = threading.Event()
    started = threading.Event()

    def stubborn(job: Job[Any], ctx: JobContext) -> None:
        started.set()
        release.wait(30)  # ignores ctx.signal

    q.process("t", stubborn, poll_interval=0.02)
    q.enqueue("t", {})
    assert started.wait(10)
    done = threading.Event()
    threading.Thread(target=lambda: (q.shutdown(0.1), done.set()), name="test-shutdown").start()
    assert done.wait(10), "shutdown must finish although the handler ignores the signal"
    (job,) = q.list_jobs()
    assert job.status == "pending"
    release.set()  # the handler's late outcome is fenced: its claim was released
    assert wait_until(lambda: not [t for t in durabl_threads() if "worker" in t])
    (job,) = q.list_jobs()
    assert job.status == "pending"


def test_shutdown_fences_new_processing(q: JobQueue) -> None:
    q.shutdown(1)
    with pytest.raises(QueueShutdownError):
        q.process("t", lambda job, ctx: None)
    assert q.enqueue("t", {}) is not None  # enqueueing stays allowed
    q.shutdown(1)  # a second call is harmless


def test_signal_handler_starts_the_drain_without_exiting(q: JobQueue) -> None:
    started = threading.Event()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        started.set()
        ctx.signal.wait(30)

    previous = signal.getsignal(signal.SIGTERM)
    q.process("t", handler, poll_interval=0.02)
    uninstall = q.install_signal_handlers(timeout=0.2)
    try:
        q.enqueue("t", {})
        assert started.wait(10)
        os.kill(os.getpid(), signal.SIGTERM)
        assert wait_until(lambda: q.draining is not None)
        assert q.draining is not None
        q.draining.result(timeout=10)
        (job,) = q.list_jobs()
        assert job.status == "pending"
    finally:
        uninstall()
    assert signal.getsignal(signal.SIGTERM) == previous


def test_uninstall_leaves_handlers_it_did_not_install(q: JobQueue) -> None:
    uninstall = q.install_signal_handlers(signals=(signal.SIGUSR1,))

    def mine(signum: int, frame: object) -> None:
        return None

    previous = signal.signal(signal.SIGUSR1, mine)
    try:
        uninstall()
        assert signal.getsignal(signal.SIGUSR1) is mine
    finally:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    del previous


def test_install_signal_handlers_needs_the_main_thread(q: JobQueue) -> None:
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            q.install_signal_handlers()
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=attempt, name="test-not-main")
    thread.start()
    thread.join()
    assert len(errors) == 1


def exactly_once(backends: list[Backend], jobs: int = 500) -> None:
    """Two queues (separate backend objects over one store), four threads each."""
    queues = [JobQueue(backend, visibility_timeout=30) for backend in backends]
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        with lock:
            counts[job.data["n"]] = counts.get(job.data["n"], 0) + 1

    for q in queues:
        q.process("t", handler, concurrency=4, poll_interval=0.01)
    for n in range(jobs):
        queues[n % 2].enqueue("t", {"n": n})
    try:
        assert wait_until(lambda: len(counts) == jobs, timeout=120)
        assert wait_until(lambda: queues[0].get_stats("t").completed == jobs, timeout=60)
    finally:
        for q in queues:
            q.shutdown(5)
    assert sorted(counts) == list(range(jobs))
    assert set(counts.values()) == {1}, "a job ran more than once"


@pytest.mark.parametrize("kind", ["mongomock", "mongodb"])
def test_500_jobs_8_threads_2_queues_exactly_once_on_mongo(kind: str) -> None:
    first = make_backend(kind)
    assert isinstance(first, MongoJobQueue)
    second = MongoJobQueue(first.db, first.collection_name)
    try:
        exactly_once([first, second])
    finally:
        cleanup_backend(first)


def test_500_jobs_8_threads_2_queues_exactly_once_in_memory() -> None:
    backend = MemoryBackend()
    exactly_once([backend, backend])
