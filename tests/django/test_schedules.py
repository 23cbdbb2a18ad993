"""``DURABL["SCHEDULES"]`` and the scheduler of ``runworkers``."""

from __future__ import annotations

import io
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from durabl import JobQueue, MemoryBackend, backend_from_url
from durabl.runtime.scheduler import forget_declared
from durabl.testing import wait_until
from durabl_django.checks import check_settings
from durabl_django.registry import JobSpec
from durabl_django.schedules import declare_schedules
from durabl_django.workers import Runner
from tests.django.conftest import ROOT, django_command, django_env


@pytest.fixture(autouse=True)
def no_declarations() -> Iterator[None]:
    forget_declared()
    yield
    forget_declared()


def test_settings_schedules_are_declared_and_stored_by_start_scheduler(settings: Any) -> None:
    settings.DURABL = {
        "URL": "mongomock://s",
        "SCHEDULES": {
            "ping": {"type": "touch", "every": 30, "data": {"path": "/tmp/x"}},
            "nightly": {"type": "report", "cron": "0 2 * * *", "timezone": "Europe/Paris"},
        },
    }
    assert declare_schedules() == ["ping", "nightly"]
    queue = JobQueue(MemoryBackend())
    queue.start_scheduler()
    try:
        stored = {s.name: s for s in queue.list_schedules()}
        assert stored["ping"].every == 30 and stored["ping"].data == {"path": "/tmp/x"}
        assert (stored["nightly"].cron, stored["nightly"].timezone) == ("0 2 * * *", "Europe/Paris")
    finally:
        queue.shutdown(timeout=1)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"every": 5}, "'type' key"),
        ({"type": "t", "cron": "nope"}, "5 fields"),
        ({"type": "t", "every": 5, "surprise": 1}, "unsupported enqueue options"),
    ],
)
def test_a_bad_settings_schedule_names_its_entry(
    settings: Any, entry: dict[str, Any], match: str
) -> None:
    settings.DURABL = {"URL": "mongomock://s", "SCHEDULES": {"broken": entry}}
    with pytest.raises(ImproperlyConfigured, match=match) as caught:
        declare_schedules()
    assert "SCHEDULES']['broken']" in str(caught.value)


def test_the_check_reports_schedules_of_the_wrong_shape(settings: Any) -> None:
    settings.DURABL = {"URL": "mongomock://s", "SCHEDULES": {"x": "every minute"}}
    assert [m.id for m in check_settings(None)] == ["durabl.E002"]


class SchedulerSpy(JobQueue):
    def __init__(self) -> None:
        super().__init__(MemoryBackend())
        self.started = 0

    def process(self, *args: Any, **options: Any) -> None:
        pass

    def start_scheduler(self) -> None:
        self.started += 1

    def install_signal_handlers(self, *, signals: Any = None, timeout: Any = 30.0) -> Any:
        return lambda: None


@pytest.mark.parametrize("scheduler", [True, False])
def test_the_runner_starts_the_scheduler_unless_told_not_to(scheduler: bool) -> None:
    queue = SchedulerSpy()
    out = io.StringIO()
    spec = JobSpec("a", lambda job, ctx: None, 1, None, None)
    runner = Runner(queue, [spec], scheduler=scheduler, stdout=out)
    runner.start()
    try:
        assert queue.started == int(scheduler)
        assert f"scheduler {'on' if scheduler else 'off'}" in out.getvalue()
    finally:
        runner.drained.set()
        runner.wait()
        queue.shutdown(timeout=1)  # the runner started its reaper: join it


def test_runworkers_runs_the_settings_schedules(tmp_path: Path) -> None:
    db, touched = tmp_path / "jobs.sqlite3", tmp_path / "touched"
    schedules = {"touch-often": {"type": "touch", "every": 1, "data": {"path": str(touched)}}}
    # Its log goes to a file: a pipe nobody reads while the test waits could fill and
    # block the process's logging, shutdown included.
    log = tmp_path / "runworkers.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            django_command("runworkers", "--type", "touch"),
            cwd=ROOT,
            env=django_env(
                DURABL_TEST_URL=f"sqlite:///{db}",
                DURABL_TEST_SCHEDULES=json.dumps(schedules),
                # A stop that hangs is shown by every thread's stack (SIGABRT below).
                PYTHONFAULTHANDLER="1",
            ),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        assert wait_until(touched.exists, 30), log.read_text()
        store = JobQueue(backend_from_url(f"sqlite:///{db}"))
        (schedule,) = store.list_schedules()
        assert schedule.name == "touch-often" and schedule.last_job_id is not None
        store.backend.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler writes the threads' stacks
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            output = log.read_text()
            raise AssertionError(f"runworkers did not stop within 30 s:\n{output}") from None
