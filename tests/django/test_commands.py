"""``manage.py runworkers`` (real signals, in a subprocess) and ``manage.py reap``."""

from __future__ import annotations

import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import IO, Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import durabl_django
from durabl import JobQueue, backend_from_url
from durabl.testing import wait_until
from tests.django.conftest import ROOT, django_command, django_env


# -- helpers ---------------------------------------------------------------------------------------
def read_line(stream: IO[str], timeout: float) -> str:
    """The next line of a subprocess pipe, or "" after ``timeout`` seconds."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            return ""
    return stream.readline()


class Workers:
    """``runworkers`` in a subprocess on the store the test shares (``jobs_url``)."""

    def __init__(self, url: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            django_command("runworkers", *args),
            cwd=ROOT,
            env=django_env(DURABL_TEST_URL=url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.stdout, self.stderr = self.proc.stdout, self.proc.stderr
        self.startup_line = read_line(self.stdout, 30).strip()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def exit_code(self, within: float) -> int:
        return self.proc.wait(timeout=within)

    def failure(self) -> str:
        """Why the test failed, from the subprocess's side (stops it)."""
        self.proc.kill()
        out, err = self.proc.communicate()
        return f"runworkers exited {self.proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()
        self.stderr.close()


@pytest.fixture
def jobs_url(durabl_store: str, tmp_path: Path) -> str:
    """The store the test and its ``runworkers`` subprocess share: a SQLite file, or the
    test's database on the real MongoDB server (``[mongodb]``; mongomock is in-process)."""
    if durabl_store.startswith("mongodb"):
        return durabl_store
    return f"sqlite:///{tmp_path / 'jobs.sqlite3'}"


@pytest.fixture
def store(jobs_url: str) -> Iterator[JobQueue]:
    """A queue on the shared store, for the test's side of the conversation."""
    queue = JobQueue(backend_from_url(jobs_url))
    yield queue
    queue.backend.close()


@pytest.fixture
def workers() -> Iterator[list[Workers]]:
    started: list[Workers] = []
    yield started
    for w in started:
        w.stop()


def status(queue: JobQueue, job_id: str | None) -> str | None:
    assert job_id is not None
    job = queue.get_job(job_id)
    return job.status if job else None


# -- runworkers ------------------------------------------------------------------------------------
@pytest.mark.on_real_mongo
def test_runworkers_processes_jobs_and_drains_on_sigterm(
    jobs_url: str, store: JobQueue, workers: list[Workers], tmp_path: Path, settings: Any
) -> None:
    from tests.django.testapp.tasks import touch_file

    touched, slow, by_task = tmp_path / "touched", tmp_path / "slow", tmp_path / "by-task"
    greeted = tmp_path / "greeted"
    quick_id = store.enqueue("touch", {"path": str(touched)})
    slow_id = store.enqueue("slow", {"path": str(slow), "seconds": 1.0})
    orchestration_id = store.enqueue("two-steps", {"name": "Ada", "path": str(greeted)})
    settings.DURABL = {"URL": jobs_url}  # this process's queue: the same store
    task_result = touch_file.enqueue(str(by_task))
    w = Workers(jobs_url)
    workers.append(w)
    assert w.startup_line == (
        "durabl: processing django-task:default (x1), django-task:emails (x1), slow (x2), "
        "touch (x1), two-steps (x1), welcome-email (x4); reaper on; scheduler on; "
        "Ctrl-C or SIGTERM to stop"
    ), w.failure()
    assert wait_until(lambda: touched.exists() and Path(f"{slow}.started").exists(), 30), (
        w.failure()
    )
    assert wait_until(lambda: status(store, quick_id) == "completed", 30), w.failure()
    assert wait_until(lambda: status(store, orchestration_id) == "completed", 30), w.failure()
    assert greeted.read_text() == "hello Ada"
    assert wait_until(lambda: status(store, task_result.id) == "completed", 30), w.failure()
    assert by_task.read_text() == "task ran"
    task_result.refresh()
    assert task_result.status == "SUCCESSFUL"

    w.signal(signal.SIGTERM)  # the slow job is mid-run: it gets to finish
    assert w.exit_code(within=30) == 0
    assert slow.exists()
    assert status(store, slow_id) == "completed"
    assert "SIGTERM received, draining (up to 30 s" in w.stderr.read()  # DURABL default
    assert "drained" in w.stdout.read()


def test_runworkers_options_pick_types_and_concurrency(
    jobs_url: str, store: JobQueue, workers: list[Workers]
) -> None:
    w = Workers(
        jobs_url, "--type", "touch", "--type", "slow", "--concurrency", "3", "--no-reaper",
        "--no-scheduler", "--shutdown-timeout", "2",
    )  # fmt: skip
    workers.append(w)
    assert w.startup_line == (
        "durabl: processing touch (x3), slow (x3); reaper off; scheduler off; "
        "Ctrl-C or SIGTERM to stop"
    ), w.failure()
    w.signal(signal.SIGINT)
    assert w.exit_code(within=30) == 0, w.failure()
    assert "SIGINT received, draining (up to 2 s" in w.stderr.read()


@pytest.mark.on_real_mongo
def test_a_second_signal_during_the_drain_stops_at_once(
    jobs_url: str, store: JobQueue, workers: list[Workers], tmp_path: Path
) -> None:
    stuck = tmp_path / "stuck"
    job_id = store.enqueue("slow", {"path": str(stuck), "seconds": 60})
    w = Workers(jobs_url, "--type", "slow", "--shutdown-timeout", "60")
    workers.append(w)
    assert wait_until(lambda: Path(f"{stuck}.started").exists(), 30), w.failure()
    w.signal(signal.SIGTERM)
    assert "draining" in read_line(w.stderr, 30)
    w.signal(signal.SIGINT)
    started = time.monotonic()
    assert w.exit_code(within=30) == 1
    assert time.monotonic() - started < 10  # not the 60 s drain
    assert "second signal (SIGINT) during the drain: stopping now" in w.stderr.read()
    assert not stuck.exists()
    assert status(store, job_id) == "active"  # abandoned: the reaper recovers it later


def test_unknown_type_is_a_command_error_listing_the_known_ones() -> None:
    with pytest.raises(CommandError) as info:
        call_command("runworkers", "--type", "touch", "--type", "nope", "--type", "nada")
    message = str(info.value)
    assert message.startswith("unknown job type(s): nope, nada; known: ")
    assert "touch" in message and "welcome-email" in message and "django-task:emails" in message
    assert durabl_django.get_queue().processors == {}  # nothing was started


def test_bad_concurrency_is_a_usage_error() -> None:
    with pytest.raises(CommandError, match="must be at least 1"):
        call_command("runworkers", "--concurrency", "0")


def test_runworkers_without_declared_jobs_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("durabl_django.management.commands.runworkers.declared_jobs", lambda: {})
    with pytest.raises(CommandError, match="no job types declared"):
        call_command("runworkers")


def test_runworkers_on_an_unusable_store_is_one_line(settings: Any, tmp_path: Path) -> None:
    settings.DURABL = {"URL": f"sqlite:///{tmp_path}/no-such-dir/jobs.sqlite3"}
    with pytest.raises(CommandError, match="cannot start the workers on SqliteJobQueue"):
        call_command("runworkers", "--type", "touch", "--no-reaper")


# -- reap ------------------------------------------------------------------------------------------
def expire_leases(queue: JobQueue) -> None:
    """Date every running job's last heartbeat an hour back, as if its worker died then:
    older than any visibility timeout here plus the store's clock-skew allowance (2 s on a
    real MongoDB server), with no sleeping."""
    an_hour_ago = queue.backend.now() - timedelta(hours=1)
    queue.backend.col.update_many({"status": "active"}, {"$set": {"heartbeat_at": an_hour_ago}})


def cutoff_said(queue: JobQueue, timeout: str) -> str:
    """How ``reap`` states its cutoff: the visibility timeout, plus the store's clock-skew
    allowance where it has one (a real MongoDB server; not mongomock)."""
    allowance = queue.backend.clock_skew_allowance
    return f"{timeout} s" + (f" + {allowance:g} s allowed for clock skew" if allowance else "")


@pytest.mark.on_real_mongo
def test_reap_recovers_expired_leases_and_says_what_it_did(queue: JobQueue) -> None:
    retryable = queue.enqueue("touch", {"path": "a"}, max_attempts=3)
    last_try = queue.enqueue("touch", {"path": "b"}, max_attempts=1)
    claimed = queue.backend.claim("touch", limit=2, lease_owner="a-worker-that-died")
    assert len(claimed) == 2
    expire_leases(queue)
    out = StringIO()
    call_command("reap", "--visibility-timeout", "60", stdout=out)
    assert out.getvalue().strip() == (
        f"reaped 2 job(s) with a lease older than {cutoff_said(queue, '60')}: "
        "1 pending again, 1 failed as stalled, 0 superseded"
    )
    assert status(queue, retryable) == "pending"
    assert status(queue, last_try) == "failed"
    failed = queue.get_job(last_try or "")
    assert failed is not None and failed.failure_kind == "stalled"


@pytest.mark.on_real_mongo
def test_reap_lists_job_ids_when_verbose(queue: JobQueue) -> None:
    job_id = queue.enqueue("touch", {"path": "a"})
    queue.backend.claim("touch", lease_owner="gone")
    expire_leases(queue)
    out = StringIO()
    call_command("reap", "--visibility-timeout", "60", verbosity=2, stdout=out)
    assert out.getvalue().splitlines()[-1] == f"job ids: {job_id}"


@pytest.mark.on_real_mongo
def test_reap_uses_the_configured_visibility_timeout(durabl_store: str, settings: Any) -> None:
    settings.DURABL = {"URL": durabl_store, "VISIBILITY_TIMEOUT": 120}
    queue = durabl_django.get_queue()
    queue.enqueue("touch", {"path": "a"})
    queue.backend.claim("touch", lease_owner="alive")
    out = StringIO()
    call_command("reap", stdout=out)
    assert out.getvalue().strip() == (
        f"reaped 0 job(s) with a lease older than {cutoff_said(queue, '120')}: "
        "0 pending again, 0 failed as stalled, 0 superseded"
    )


def test_reap_on_a_mongodb_server_states_its_clock_skew_allowance(
    real_mongo_url: str, settings: Any
) -> None:
    """A server's clock and each worker's may differ, so on a real MongoDB server the reaper
    takes a lease only once it is older than the visibility timeout plus the store's
    clock-skew allowance (2 s by default): the report states the cutoff it used."""
    settings.DURABL = {"URL": real_mongo_url}
    queue = durabl_django.get_queue()
    queue.enqueue("touch", {"path": "a"})
    queue.backend.claim("touch", lease_owner="alive")
    out = StringIO()
    call_command("reap", "--visibility-timeout", "0.01", stdout=out)
    assert out.getvalue().strip() == (  # a moment old: within the allowance, not taken
        "reaped 0 job(s) with a lease older than 0.01 s + 2 s allowed for clock skew: "
        "0 pending again, 0 failed as stalled, 0 superseded"
    )


def test_reap_rejects_a_non_positive_timeout() -> None:
    with pytest.raises(CommandError, match="positive number of seconds"):
        call_command("reap", "--visibility-timeout", "0")
