"""The public surface: global queue, URLs, test backends, stats and failed-job handling."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import durabl
from durabl import (
    DummyBackend,
    DurablError,
    FatalJobError,
    ImmediateBackend,
    Job,
    JobContext,
    JobQueue,
    MongoJobQueue,
    SqliteJobQueue,
    backend_from_url,
    create_job_queue,
    get_default_queue,
    global_queue,
    set_global_backend,
)
from durabl.runtime import globals as durabl_globals
from durabl.testing import FakeClock
from tests.conftest import make_mongomock_backend

API_NAMES = [
    "JobQueue",
    "MongoJobQueue",
    "backend_from_url",
    "DummyBackend",
    "ImmediateBackend",
    "Job",
    "JobHandle",
    "JobContext",
    "QueueStats",
    "JobEvent",
    "FatalJobError",
    "DedupeScopeConflictError",
    "QueueShutdownError",
    "DurablError",
    "NonRetryable",
    "NondeterminismError",
    "JournalTooLarge",
    "set_global_backend",
    "get_default_queue",
    "create_job_queue",
    "global_queue",
    "job",
    "declared_types",
    "PayloadValidationError",
]


@pytest.mark.parametrize("name", API_NAMES)
def test_contract_names_are_importable_from_durabl(name: str) -> None:
    assert name in durabl.__all__
    assert getattr(durabl, name) is not None


def test_every_durabl_error_shares_one_base() -> None:
    for name in ("DedupeScopeConflictError", "QueueShutdownError", "DocumentTooLargeError"):
        assert issubclass(getattr(durabl, name), DurablError)
    assert issubclass(durabl.DedupeScopeConflictError, ValueError)


@pytest.fixture
def clean_globals() -> Any:
    saved = durabl_globals._state
    durabl_globals._state = durabl_globals._GlobalState()
    yield
    durabl_globals._state = saved


def test_default_queue_needs_a_backend(clean_globals: None) -> None:
    with pytest.raises(RuntimeError, match="set_global_backend"):
        get_default_queue()


def test_default_queue_is_built_lazily_from_the_captured_options(clean_globals: None) -> None:
    backend = DummyBackend()
    logger = logging.getLogger("jobs")
    set_global_backend(backend, logger=logger, visibility_timeout=60)
    queue = get_default_queue()
    assert get_default_queue() is queue
    assert (queue.backend, queue.logger, queue.visibility_timeout) == (backend, logger, 60)
    other = create_job_queue(visibility_timeout=10)
    assert other is not queue and other.backend is backend and other.visibility_timeout == 10
    assert create_job_queue(DummyBackend()).backend is not backend


def test_global_queue_scope_restores_the_prior_state(clean_globals: None) -> None:
    outer_backend = DummyBackend()
    set_global_backend(outer_backend)
    outer = get_default_queue()
    inner_backend = DummyBackend()
    with global_queue(inner_backend, visibility_timeout=5) as inner:
        assert get_default_queue() is inner and inner.backend is inner_backend
        with pytest.raises(RuntimeError, match="overlap"), global_queue(DummyBackend()):
            pass
    assert get_default_queue() is outer
    assert inner.draining is not None  # only the scope's own queue was shut down
    assert outer.draining is None


def test_a_bad_global_queue_option_does_not_poison_later_scopes(clean_globals: None) -> None:
    with pytest.raises(TypeError), global_queue(DummyBackend(), no_such_option=1):
        pass
    with global_queue(DummyBackend()) as queue:
        assert queue.enqueue("t", {}) is not None


def test_dummy_backend_records_jobs_and_never_runs_them() -> None:
    backend = DummyBackend()
    queue = JobQueue(backend)
    ran: list[Any] = []
    queue.register("welcome", lambda job, ctx: ran.append(job))
    queue.enqueue("welcome", {"user": "u1"}, dedupe_key="welcome:u1")
    assert queue.enqueue("welcome", {"user": "u1"}, dedupe_key="welcome:u1") is None
    assert [(j.type, j.data, j.dedupe_key) for j in backend.jobs] == [
        ("welcome", {"user": "u1"}, "welcome:u1")
    ]
    assert queue.run_pending() == 0 and ran == []


def test_immediate_backend_runs_the_handler_during_enqueue() -> None:
    queue = JobQueue(ImmediateBackend())
    seen: list[Any] = []
    queue.process("welcome", lambda job, ctx: seen.append(job.data))
    job_id = queue.enqueue("welcome", {"user": "u1"})
    assert seen == [{"user": "u1"}]
    job = queue.get_job(job_id or "")
    assert job is not None and job.status == "completed"


def test_run_now_on_an_immediate_backend_runs_the_delayed_job_at_once() -> None:
    queue = JobQueue(ImmediateBackend())
    seen: list[Any] = []
    queue.process("t", lambda job, ctx: seen.append(job.data))
    first = queue.enqueue("t", {"n": 1}, delay=3600) or ""
    queue.enqueue("t", {"n": 2}, delay=3600)
    assert seen == []
    assert queue.run_now(first) is True
    assert seen == [{"n": 1}]
    assert queue.run_now(first) is False  # completed: no longer pending
    assert queue.run_now_matching(type="t") == 1
    assert seen == [{"n": 1}, {"n": 2}]


def test_cancel_matching_on_the_queue_cancels_every_pending_match() -> None:
    queue = JobQueue(DummyBackend())
    ids = [queue.enqueue("t", {"n": n}) or "" for n in range(3)]
    queue.enqueue("other", {})
    assert queue.cancel_matching(type="t", reason="not needed") == 3
    for job_id in ids:
        job = queue.get_job(job_id)
        assert job is not None and (job.status, job.fail_reason) == ("cancelled", "not needed")
    assert queue.count_jobs(status="pending") == 1


def test_immediate_backend_records_failures_like_production() -> None:
    queue = JobQueue(ImmediateBackend())

    def poison(job: Job[Any], ctx: JobContext) -> None:
        raise FatalJobError("bad payload")

    queue.process("t", poison)
    job_id = queue.enqueue("t", {}) or ""
    job = queue.get_job(job_id)
    assert job is not None and job.failure_kind == "fatal"


def test_immediate_backend_runs_nothing_after_shutdown() -> None:
    queue = JobQueue(ImmediateBackend())
    seen: list[Any] = []
    queue.process("t", lambda job, ctx: seen.append(job))
    queue.shutdown(1)
    queue.enqueue("t", {})
    assert seen == []


def test_handlers_receive_a_plain_job_without_lifecycle_methods() -> None:
    queue = JobQueue(ImmediateBackend())
    received: list[Any] = []
    queue.process("t", lambda job, ctx: received.append((job, ctx)))
    queue.enqueue("t", {})
    ((job, ctx),) = received
    assert type(job) is Job
    assert not hasattr(job, "complete") and not hasattr(job, "claim_token")
    assert {n for n in dir(ctx) if not n.startswith("_")} == {"signal", "log"}


def test_backend_from_url_understands_each_scheme() -> None:
    mock = backend_from_url("mongomock:///from_url_test")
    assert isinstance(mock, MongoJobQueue) and mock.db.name == "from_url_test"
    assert backend_from_url("mongomock://short_form").db.name == "short_form"  # type: ignore[attr-defined]
    real = backend_from_url("mongodb://db.invalid:27017/app", serverSelectionTimeoutMS=50)
    assert isinstance(real, MongoJobQueue) and real.db.name == "app"
    real.close()
    default = backend_from_url("mongodb://db.invalid:27017", serverSelectionTimeoutMS=50)
    assert default.db.name == "durabl"  # type: ignore[attr-defined]
    default.close()


def test_mongomock_urls_share_one_store_per_process() -> None:
    first = JobQueue(backend_from_url("mongomock:///shared_store"))
    second = JobQueue(backend_from_url("mongomock:///shared_store"))
    job_id = first.enqueue("t", {}) or ""
    assert second.get_job(job_id) is not None
    first.backend.drop()  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["ftp://x", "not a url", "", "redis://localhost"])
def test_backend_from_url_rejects_what_it_cannot_use(url: str) -> None:
    with pytest.raises(ValueError):
        backend_from_url(url)


def test_sqlite_urls_give_a_working_sqlite_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = backend_from_url("sqlite:///jobs.sqlite3")
    absolute = backend_from_url(f"sqlite:///{tmp_path / 'abs.sqlite3'}")  # sqlite:////tmp/...
    try:
        assert isinstance(relative, SqliteJobQueue) and isinstance(absolute, SqliteJobQueue)
        assert relative.path == str(tmp_path / "jobs.sqlite3")
        assert absolute.path == str(tmp_path / "abs.sqlite3")
        for backend in (relative, absolute):
            queue = JobQueue(backend)
            job_id = queue.enqueue("t", {"n": 1}, dedupe_key="k")
            assert job_id is not None
            assert queue.enqueue("t", {"n": 2}, dedupe_key="k") is None
            job = queue.get_job(job_id)
            assert job is not None and job.data == {"n": 1}
        assert (tmp_path / "jobs.sqlite3").exists() and (tmp_path / "abs.sqlite3").exists()
    finally:
        relative.close()
        absolute.close()
    for bad in ("sqlite://", "sqlite:///", "sqlite:///:memory:"):
        with pytest.raises(ValueError):
            backend_from_url(bad)
    quiet = backend_from_url(f"sqlite:///{tmp_path / 'q.db'}", change_check_interval=None)
    assert isinstance(quiet, SqliteJobQueue) and not quiet.supports_push
    assert backend_from_url(f"sqlite:///{tmp_path / 'q.db'}", change_check_interval=0.02)
    with pytest.raises(ValueError, match="take no options"):
        backend_from_url(f"sqlite:///{tmp_path / 'q.db'}", use_change_streams=True)


@pytest.fixture
def q(clock: FakeClock) -> JobQueue:
    return JobQueue(make_mongomock_backend(clock), visibility_timeout=30)


def test_stats_lag_counts_only_due_jobs(q: JobQueue, clock: FakeClock) -> None:
    q.enqueue("t", {})
    clock.advance(90)
    q.enqueue("t", {})
    q.enqueue("t", {}, delay=timedelta(days=7))
    stats = q.get_stats("t")
    assert stats.pending == 3
    assert stats.oldest_pending_lag == pytest.approx(90)
    assert stats.oldest_pending_run_at == clock.now() - timedelta(seconds=90)
    assert q.get_stats("other").pending == 0 and q.get_stats("other").oldest_pending_lag == 0


def test_stats_break_failures_down_by_kind(q: JobQueue) -> None:
    def handler(job: Job[Any], ctx: JobContext) -> None:
        if job.data["kind"] == "fatal":
            raise FatalJobError("poison")
        raise ValueError("flaky")

    q.register("t", handler)
    q.enqueue("t", {"kind": "fatal"})
    q.enqueue("t", {"kind": "flaky"}, max_attempts=1)
    q.enqueue("t", {"kind": "fatal"})
    q.run_pending()
    stats = q.get_stats()
    assert stats.failed == 3
    assert dict(stats.failed_by_kind) == {"fatal": 2, "retries-exhausted": 1}


def test_list_failed_newest_first_and_retry(q: JobQueue, clock: FakeClock) -> None:
    q.register("t", lambda job, ctx: 1 / 0)
    first = q.enqueue("t", {"n": 1}, max_attempts=1) or ""
    q.run_pending()
    clock.advance(5)
    second = q.enqueue("t", {"n": 2}, max_attempts=1) or ""
    q.run_pending()
    assert [j.id for j in q.list_failed()] == [second, first]
    assert [j.id for j in q.list_failed(failure_kind="fatal")] == []
    assert q.retry(first) is True
    job = q.get_job(first)
    assert job is not None and (job.status, job.attempts, job.failure_kind) == ("pending", 0, None)
    assert q.retry(first) is False  # no longer failed
    assert q.retry("0" * 24) is False


def test_retry_refuses_when_the_key_is_live_again(q: JobQueue) -> None:
    q.register("t", lambda job, ctx: 1 / 0)
    failed = q.enqueue("t", {}, dedupe_key="k", max_attempts=1) or ""
    q.run_pending()
    q.enqueue("t", {}, dedupe_key="k")  # a new live job took the key
    assert q.retry(failed) is False
    job = q.get_job(failed)
    assert job is not None and job.status == "failed"


def test_has_outstanding_is_advisory_and_per_type(q: JobQueue) -> None:
    q.enqueue("sync", {}, dedupe_key="user:1")
    assert q.has_outstanding("sync", "user:1")
    assert not q.has_outstanding("other", "user:1")
    assert not q.has_outstanding("sync", "user:2")


def test_run_pending_names_an_unknown_type(q: JobQueue) -> None:
    with pytest.raises(ValueError, match="no handler registered"):
        q.run_pending("nope")


def test_validate_enqueue_raises_what_enqueue_would_and_writes_nothing() -> None:
    from durabl import validate_enqueue

    validate_enqueue("t", {"ok": [1, 2]}, delay=5, dedupe_key="k", coalesce="latest")
    with pytest.raises(TypeError):
        validate_enqueue("t", {"bad": {1, 2}})
    with pytest.raises(ValueError, match="max_attempts"):
        validate_enqueue("t", {}, max_attempts=0)


def test_reap_once_sweeps_until_nothing_is_left(clock: FakeClock) -> None:
    q = JobQueue(make_mongomock_backend(clock), visibility_timeout=30)
    for n in range(3):
        q.enqueue("t", {"n": n}, max_attempts=1 if n == 0 else 3)
    q.backend.claim("t", limit=3)
    clock.advance(31)
    report = q.reap_once()
    assert (report.recovered, report.stalled, report.handled) == (2, 1, 3)
    assert q.reap_once().handled == 0


def test_async_handlers_are_refused_at_registration() -> None:
    async def handler(job: Job[Any], ctx: JobContext) -> None:
        return None

    with pytest.raises(TypeError, match="async"):
        JobQueue(DummyBackend()).register("t", handler)


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("mongodb://db.invalid:27017/my app", {}),
        ("mongomock:///fine", {"collection": "a$b"}),
        ("mongodb://db.invalid:27017/app", {"collection": "a$b"}),
    ],
)
def test_bad_mongo_names_are_value_errors(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="name"):
        backend_from_url(url, **options)
