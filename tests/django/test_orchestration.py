"""``@durabl_django.orchestration``: declaring, running under the queue, check durabl.E008,
and declared jobs on an immediate backend."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError

import durabl
import durabl_django
from durabl import Job, JobQueue, MemoryBackend, OrchestrationContext
from durabl.orchestrator import DEFAULT_MAX_JOURNAL_BYTES, OrchestrationHandler
from durabl.testing import OrchestrationHarness
from durabl_django import checks as durabl_checks
from durabl_django.registry import registry
from durabl_django.workers import declared_jobs
from tests.django.testapp import jobs


class NoJournalBackend(MemoryBackend):
    """A store that cannot keep an orchestration journal."""

    supports_journal = False


def body(job: Job[Any], octx: OrchestrationContext) -> None:
    octx.step("only", lambda keys, signal: 1)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Undo what a test declares in the job registry."""
    specs = dict(registry._specs)
    duplicates = list(registry.duplicates)
    yield
    registry._specs = specs
    registry.duplicates = duplicates


def e008(messages: list[checks.CheckMessage]) -> list[checks.CheckMessage]:
    return [m for m in messages if m.id == "durabl.E008"]


# -- declaring ------------------------------------------------------------------------------------
def test_an_orchestration_is_declared_with_an_orchestration_handler() -> None:
    spec = registry.get("two-steps")
    assert spec is not None and spec.is_orchestration
    assert isinstance(spec.handler, OrchestrationHandler)
    assert spec.handler.body is jobs.two_steps
    assert spec.handler.step_timeout == 30.0
    assert spec.handler.max_duration is None
    assert spec.handler.max_journal_bytes == DEFAULT_MAX_JOURNAL_BYTES
    assert (spec.concurrency, spec.poll_interval, spec.heartbeat_interval) == (1, 0.2, None)
    assert spec.origin == "tests.django.testapp.jobs.two_steps"
    assert "two-steps" in declared_jobs()
    plain = registry.get("touch")
    assert plain is not None and not plain.is_orchestration


def test_declaring_returns_the_body_unchanged_and_starts_nothing(clean_registry: None) -> None:
    declared = durabl_django.orchestration(
        "declared-here",
        concurrency=3,
        poll_interval=1,
        heartbeat_interval=2,
        step_timeout=timedelta(minutes=10),
        max_duration=3600,
        max_journal_bytes=50_000,
    )(body)
    assert declared is body
    spec = registry.get("declared-here")
    assert spec is not None and isinstance(spec.handler, OrchestrationHandler)
    assert (spec.concurrency, spec.poll_interval, spec.heartbeat_interval) == (3, 1, 2)
    assert (spec.handler.step_timeout, spec.handler.max_duration) == (600.0, 3600.0)
    assert spec.handler.max_journal_bytes == 50_000
    assert durabl_django.get_queue().processors == {}


def test_the_declared_body_runs_in_the_harness() -> None:
    harness = OrchestrationHarness(jobs.two_steps, data={"name": "Bo", "path": "/dev/null"})
    harness.run()
    assert [step.name for step in harness.steps] == ["greet", "write"]
    assert harness.steps[0].result == "hello Bo"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"poll_interval": 0},
        {"heartbeat_interval": -1},
        {"step_timeout": 0},
        {"max_duration": -5},
        {"max_journal_bytes": 0},
        {"max_journal_bytes": 1.5},
    ],
)
def test_bad_orchestration_options_raise_at_the_decorator(kwargs: Any) -> None:
    with pytest.raises(ValueError):
        durabl_django.orchestration("x", **kwargs)


def test_decorating_something_not_callable_raises() -> None:
    with pytest.raises(TypeError, match="must decorate a callable"):
        durabl_django.orchestration("x")(42)  # type: ignore[type-var]


def test_a_job_and_an_orchestration_of_one_type_are_e005(clean_registry: None) -> None:
    durabl_django.orchestration("touch")(body)
    messages = durabl_checks.check_jobs()
    assert [m.id for m in messages] == ["durabl.E005"]
    assert "tests.django.test_orchestration.body" in messages[0].msg


# -- running --------------------------------------------------------------------------------------
def test_the_queue_runs_a_declared_orchestration_step_by_step(
    queue: JobQueue, tmp_path: Path
) -> None:
    target = tmp_path / "greeting"
    job_id = durabl_django.enqueue("two-steps", {"name": "Ada", "path": str(target)})
    assert job_id is not None
    assert queue.run_pending("two-steps") == 1
    job = queue.get_job(job_id)
    assert job is not None and job.status == "completed"
    assert target.read_text() == "hello Ada"
    assert [m.message for m in job.logs] == ["wrote 'hello Ada'"]
    assert len(job.journal) >= 2  # both steps (and the bootstrap entry) journaled


# -- E008 -----------------------------------------------------------------------------------------
def test_a_journal_capable_store_passes(settings: Any, tmp_path: Path) -> None:
    for configured in (
        {"URL": "mongomock://e008"},
        {"URL": f"sqlite:///{tmp_path}/jobs.sqlite3"},
        {"BACKEND": "durabl.DummyBackend"},
        {"BACKEND": "durabl.ImmediateBackend"},
    ):
        settings.DURABL = configured
        assert e008(durabl_checks.check_orchestrations()) == [], configured


def test_an_orchestration_on_a_store_without_a_journal_is_e008(settings: Any) -> None:
    settings.DURABL = {"BACKEND": f"{__name__}.NoJournalBackend"}
    [message] = durabl_checks.check_orchestrations()
    assert message.id == "durabl.E008"
    assert message.is_serious()
    assert "'two-steps'" in message.msg and "NoJournalBackend" in message.msg
    assert message.obj == "tests.django.testapp.jobs.two_steps"
    found = checks.run_checks(tags=["durabl"])
    assert [m.id for m in found if m.id == "durabl.E008"] == ["durabl.E008"]


def test_e008_needs_a_declared_orchestration(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.DURABL = {"BACKEND": f"{__name__}.NoJournalBackend"}
    plain = {t: s for t, s in registry.specs().items() if not s.is_orchestration}
    monkeypatch.setattr(registry, "specs", lambda: plain)
    assert durabl_checks.check_orchestrations() == []


def test_e008_stays_quiet_when_the_settings_are_wrong(settings: Any) -> None:
    settings.DURABL = {"URL": "ftp://nope"}
    assert durabl_checks.check_orchestrations() == []  # E003 says it


# -- an immediate backend runs declared jobs inside enqueue --------------------------------------
def test_immediate_backend_runs_declared_jobs_and_orchestrations(
    settings: Any, tmp_path: Path
) -> None:
    settings.DURABL = {"BACKEND": "durabl.ImmediateBackend"}
    touched, greeted = tmp_path / "touched", tmp_path / "greeted"
    touch_id = durabl_django.enqueue("touch", {"path": str(touched)})
    assert touched.read_text() == touch_id
    orchestration_id = durabl_django.enqueue("two-steps", {"name": "Cy", "path": str(greeted)})
    assert greeted.read_text() == "hello Cy"
    job = durabl_django.get_queue().get_job(orchestration_id or "")
    assert job is not None and job.status == "completed"


def test_immediate_backend_runs_declared_jobs_for_durabl_get_default_queue_too(
    settings: Any, tmp_path: Path
) -> None:
    settings.DURABL = {"BACKEND": "durabl.ImmediateBackend"}  # nothing calls get_queue()
    touched = tmp_path / "touched"
    job_id = durabl.get_default_queue().enqueue("touch", {"path": str(touched)})
    assert touched.read_text() == job_id


def test_runworkers_refuses_an_immediate_backend(settings: Any) -> None:
    settings.DURABL = {"BACKEND": "durabl.ImmediateBackend"}
    with pytest.raises(CommandError, match="nothing for runworkers to do"):
        call_command("runworkers", stdout=StringIO(), stderr=StringIO())
