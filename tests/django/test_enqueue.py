"""Declaring jobs, enqueue() and enqueue_on_commit()."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

import pytest
from django.db import transaction

import durabl_django
from durabl import JobQueue
from durabl_django.registry import JobSpec, registry
from durabl_django.workers import declared_jobs
from tests.django.testapp import jobs


def test_import_durabl_django_reads_no_settings_and_imports_no_django() -> None:
    code = (
        "import sys, durabl_django\n"
        "assert callable(durabl_django.job) and callable(durabl_django.enqueue_on_commit)\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_jobs_modules_are_autodiscovered_with_their_options() -> None:
    spec = registry.get("welcome-email")
    assert spec == JobSpec("welcome-email", jobs.welcome_email, 4, 0.2, None)
    assert {"welcome-email", "touch", "slow"} <= set(declared_jobs())


def test_declaring_returns_the_function_unchanged_and_starts_nothing() -> None:
    assert jobs.touch.__name__ == "touch"
    assert durabl_django.get_queue().processors == {}


@pytest.mark.parametrize(
    "kwargs",
    [{"concurrency": 0}, {"concurrency": True}, {"poll_interval": 0}, {"heartbeat_interval": "1"}],
)
def test_bad_declaration_options_raise(kwargs: Any) -> None:
    with pytest.raises(ValueError):
        durabl_django.job("x", **kwargs)


def test_declaring_a_non_string_type_raises() -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        durabl_django.job("")


def test_enqueue_goes_to_the_configured_queue(queue: JobQueue) -> None:
    job_id = durabl_django.enqueue("welcome-email", {"user": 1}, priority=-5)
    assert job_id is not None
    job = queue.get_job(job_id)
    assert job is not None and job.priority == -5 and job.status == "pending"
    jobs.RAN.clear()
    assert queue.run_pending() == 1
    assert jobs.RAN == [("welcome-email", {"user": 1})]


def test_enqueue_returns_none_when_the_dedupe_slot_is_taken(queue: JobQueue) -> None:
    assert durabl_django.enqueue("touch", {"path": "a"}, dedupe_key="k")
    assert durabl_django.enqueue("touch", {"path": "a"}, dedupe_key="k") is None


def pending(queue: JobQueue) -> list[Any]:
    return [j.data for j in queue.list_jobs(status="pending")]


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_waits_for_the_commit(queue: JobQueue) -> None:
    with transaction.atomic():
        durabl_django.enqueue_on_commit("touch", {"path": "after-commit"})
        assert pending(queue) == []
    assert pending(queue) == [{"path": "after-commit"}]


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_enqueues_nothing_on_rollback(queue: JobQueue) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        durabl_django.enqueue_on_commit("touch", {"path": "never"})
        raise RuntimeError("roll back")
    assert pending(queue) == []


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_in_a_rolled_back_savepoint_is_dropped(queue: JobQueue) -> None:
    with transaction.atomic():
        durabl_django.enqueue_on_commit("touch", {"path": "outer"})
        with pytest.raises(RuntimeError), transaction.atomic():
            durabl_django.enqueue_on_commit("touch", {"path": "inner"})
            raise RuntimeError("roll back the savepoint")
    assert pending(queue) == [{"path": "outer"}]


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_outside_a_transaction_enqueues_at_once(queue: JobQueue) -> None:
    durabl_django.enqueue_on_commit("touch", {"path": "now"})
    assert pending(queue) == [{"path": "now"}]


@pytest.mark.django_db
def test_enqueue_on_commit_passes_options_after_commit(
    queue: JobQueue, django_capture_on_commit_callbacks: Any
) -> None:
    later = datetime(2099, 1, 1, tzinfo=timezone.utc)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        durabl_django.enqueue_on_commit("touch", {"path": "x"}, run_at=later, dedupe_key="d")
    assert len(callbacks) == 1
    [job] = queue.list_jobs(status="pending")
    assert job.run_at == later and job.dedupe_key == "d"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"priority": "high"}, ValueError),
        ({"dedupe_scope": "forever"}, ValueError),
        ({"coalesce": "latest"}, ValueError),  # needs a dedupe key
        ({"run_at": datetime(2030, 1, 1)}, ValueError),  # naive
        ({"max_attempts": 0}, ValueError),
        ({"no_such_option": 1}, TypeError),
    ],
)
def test_enqueue_on_commit_rejects_bad_options_at_the_call_site(
    queue: JobQueue, django_capture_on_commit_callbacks: Any, options: Any, error: type
) -> None:
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(error):
        durabl_django.enqueue_on_commit("touch", {"path": "x"}, **options)
    assert callbacks == []


@pytest.mark.django_db
def test_enqueue_on_commit_rejects_a_payload_the_store_cannot_hold(
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(TypeError):
        durabl_django.enqueue_on_commit("touch", {"handle": object()})
    assert callbacks == []


@pytest.mark.django_db
def test_enqueue_on_commit_copies_the_payload(
    queue: JobQueue, django_capture_on_commit_callbacks: Any
) -> None:
    data = {"path": "before", "tags": ["a"]}
    with django_capture_on_commit_callbacks(execute=True):
        durabl_django.enqueue_on_commit("touch", data)
        data["path"] = "after"
        data["tags"].append("b")
    assert pending(queue) == [{"path": "before", "tags": ["a"]}]
