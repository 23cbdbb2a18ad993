"""System checks durabl.E001-E007 and the database-tagged connectivity check E010."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.apps import AppConfig, apps
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

import durabl_django
from durabl import Job, JobContext, MemoryBackend, backend_from_url
from durabl_django import checks as durabl_checks
from durabl_django.registry import autodiscover, registry


def ids(messages: list[checks.CheckMessage]) -> list[str]:
    return [m.id or "" for m in messages]


def run_durabl_checks(databases: list[str] | None = None) -> list[str]:
    found = checks.run_checks(tags=["durabl", "database"], databases=databases)
    return [i for i in ids(found) if i.startswith("durabl.")]


def sink(event: object) -> None:
    pass


NOT_CALLABLE = 42
RELEASE = threading.Event()


class HangingBackend(MemoryBackend):
    """A store whose startup never answers (until the test lets it go)."""

    def startup(self) -> None:
        RELEASE.wait(30)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Undo what a test declares or records in the job registry."""
    specs = dict(registry._specs)
    duplicates = list(registry.duplicates)
    failures = list(registry.import_failures)
    yield
    registry._specs = specs
    registry.duplicates = duplicates
    registry.import_failures = failures


def test_test_project_has_no_durabl_errors() -> None:
    assert run_durabl_checks() == []
    call_command("check", stdout=StringIO())  # the whole project passes


@pytest.mark.parametrize(
    ("durabl", "expected"),
    [
        ({"URL": "mongomock://ok", "URLS": "x", "TIMEOUT": 1}, ["durabl.E001"]),
        ({"URL": 5}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "VISIBILITY_TIMEOUT": 0}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "VISIBILITY_TIMEOUT": True}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "SHUTDOWN_TIMEOUT": "30"}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "CHANGE_STREAMS": "yes"}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "COLLECTION": ""}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "EVENT_SINK": 3}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "ADMIN_LAG_THRESHOLD": -5}, ["durabl.E002"]),
        ({"URL": "mongomock://ok", "NOPE": 1, "DATABASE": 1}, ["durabl.E001", "durabl.E002"]),
        ({"URL": "redis://db/app"}, ["durabl.E003"]),  # no store for the scheme
        ({"URL": "no scheme at all"}, ["durabl.E003"]),
        ({"URL": "sqlite://relative-without-third-slash.db"}, ["durabl.E003"]),
        ({"URL": "sqlite:///:memory:"}, ["durabl.E003"]),
        ({"URL": "mongodb://host:99999/app"}, ["durabl.E003"]),
        ({"URL": "sqlite:///x.db", "CHANGE_STREAMS": True}, ["durabl.E003"]),
        ({"URL": "sqlite:///x.db", "DATABASE": "app"}, ["durabl.E003"]),
        ({"BACKEND": "no.such.Backend"}, ["durabl.E006"]),
        ({"BACKEND": "durabl.NoSuchBackend"}, ["durabl.E006"]),
        ({"BACKEND": f"{__name__}.NOT_CALLABLE"}, ["durabl.E006"]),
        ({"URL": "mongomock://ok", "EVENT_SINK": "no.such.sink"}, ["durabl.E006"]),
    ],
)
def test_bad_settings_are_check_errors(settings: Any, durabl: Any, expected: list[str]) -> None:
    settings.DURABL = durabl
    assert run_durabl_checks() == expected


def test_settings_that_are_not_a_dict_are_e002(settings: Any) -> None:
    settings.DURABL = ["mongomock://"]
    assert run_durabl_checks() == ["durabl.E002"]


@pytest.mark.parametrize(
    "durabl",
    [
        {"URL": "sqlite:////abs/jobs.sqlite3"},
        {"URL": "mongodb://db1,db2/app?replicaSet=rs0", "CHANGE_STREAMS": True},
        {"URL": "mongodb://127.0.0.1:1/app", "DATABASE": "other", "COLLECTION": "q"},
        {"URL": "mongomock://", "VISIBILITY_TIMEOUT": 30.5, "SHUTDOWN_TIMEOUT": 5},
        {"BACKEND": "durabl.DummyBackend", "EVENT_SINK": f"{__name__}.sink"},
        {"BACKEND": "durabl.ImmediateBackend", "ADMIN_LAG_THRESHOLD": 60},
    ],
)
def test_good_settings_pass_without_connecting(settings: Any, durabl: Any) -> None:
    settings.DURABL = durabl
    assert run_durabl_checks() == []


@pytest.mark.parametrize("durabl", [{}, {"URL": "sqlite:///relative/jobs.sqlite3"}])
def test_a_relative_sqlite_path_is_a_warning(settings: Any, durabl: Any) -> None:
    settings.DURABL = durabl
    assert run_durabl_checks() == ["durabl.W001"]


def test_errors_stop_manage_py_commands(settings: Any) -> None:
    settings.DURABL = {"URL": "ftp://nope"}
    with pytest.raises(SystemCheckError, match=r"durabl\.E003"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_a_jobs_module_that_fails_to_import_is_e004(
    monkeypatch: pytest.MonkeyPatch, clean_registry: None
) -> None:
    broken = AppConfig.create("tests.django.brokenapp")
    monkeypatch.setattr(apps, "get_app_configs", lambda: [broken])
    autodiscover()  # keeps the error instead of raising it
    messages = durabl_checks.check_jobs()
    assert ids(messages) == ["durabl.E004"]
    assert "tests.django.brokenapp.jobs" in messages[0].msg
    assert "boom while importing" in messages[0].msg
    assert "Traceback" in (messages[0].hint or "")
    assert "durabl.E004" in run_durabl_checks()


def test_e004_clears_once_the_module_imports(
    monkeypatch: pytest.MonkeyPatch, clean_registry: None
) -> None:
    registry.record_import_failure("tests.django.testapp.jobs", RuntimeError("once"))
    assert ids(durabl_checks.check_jobs()) == ["durabl.E004"]
    autodiscover()  # the real apps: the test app's jobs module imports fine
    assert durabl_checks.check_jobs() == []


def test_a_job_type_declared_twice_is_e005_not_an_import_error(clean_registry: None) -> None:
    @durabl_django.job("welcome-email")
    def impostor(job: Job[object], ctx: JobContext) -> None:
        pass

    messages = durabl_checks.check_jobs()
    assert ids(messages) == ["durabl.E005"]
    assert "tests.django.testapp.jobs.welcome_email" in messages[0].msg
    assert "impostor" in messages[0].msg
    spec = registry.get("welcome-email")
    assert spec is not None and spec.handler.__name__ == "welcome_email"  # the first stays


def test_redeclaring_the_same_handler_is_not_a_duplicate(clean_registry: None) -> None:
    from tests.django.testapp import jobs

    durabl_django.job("touch", poll_interval=0.2)(jobs.touch)
    assert durabl_checks.check_jobs() == []


# -- E010: only with --database -------------------------------------------------------------------
def test_connectivity_check_runs_only_for_the_database_tag(settings: Any, tmp_path: Any) -> None:
    settings.DURABL = {"URL": f"sqlite:///{tmp_path}/missing-dir/jobs.sqlite3"}
    assert run_durabl_checks() == []  # plain `manage.py check`: no I/O, no E010
    assert run_durabl_checks(databases=["default"]) == ["durabl.E010"]


def test_connectivity_check_passes_on_a_reachable_store(settings: Any, tmp_path: Any) -> None:
    settings.DURABL = {"URL": f"sqlite:///{tmp_path}/jobs.sqlite3"}
    assert run_durabl_checks(databases=["default"]) == []
    out = StringIO()
    call_command("check", databases=["default"], stdout=out)
    assert "no issues" in out.getvalue()


def test_unreachable_mongodb_is_e010_within_the_timeout(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durabl_checks, "CONNECTIVITY_TIMEOUT", 2.0)
    settings.DURABL = {"URL": "mongodb://127.0.0.1:1/app"}  # nothing listens on port 1
    with pytest.raises(SystemCheckError, match=r"durabl\.E010") as info:
        call_command("check", databases=["default"], stdout=StringIO(), stderr=StringIO())
    assert "did not answer: BackendUnavailableError" in str(info.value)
    assert "Connection refused" in str(info.value)
    assert "Traceback" not in str(info.value)


def test_change_streams_on_mongomock_is_e010(settings: Any) -> None:
    settings.DURABL = {"URL": "mongomock://cs", "CHANGE_STREAMS": True}
    assert run_durabl_checks() == []
    assert run_durabl_checks(databases=["default"]) == ["durabl.E010"]


def test_e010_can_be_silenced(settings: Any, tmp_path: Any) -> None:
    settings.DURABL = {"URL": f"sqlite:///{tmp_path}/missing-dir/jobs.sqlite3"}
    with override_settings(SILENCED_SYSTEM_CHECKS=["durabl.E010"]):
        call_command("check", databases=["default"], stdout=StringIO())


def test_a_store_that_hangs_is_e010_after_the_timeout(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durabl_checks, "CONNECTIVITY_TIMEOUT", 0.2)
    settings.DURABL = {"BACKEND": f"{__name__}.HangingBackend"}
    try:
        [message] = durabl_checks.check_connectivity(databases=["default"])
    finally:
        RELEASE.set()
    assert message.id == "durabl.E010"
    assert "no answer within 0.2 s" in message.msg


class NoJournalBackend(MemoryBackend):
    """A store that cannot keep an orchestration journal."""

    supports_journal = False


@pytest.mark.parametrize(
    "url", ["mongodb://127.0.0.1:1/app", "postgresql://postgres@127.0.0.1:1/app", "sqlite:///"]
)
def test_e008_hint_names_each_durable_store_that_keeps_a_journal(
    settings: Any, tmp_path: Any, url: str
) -> None:
    """The fix E008 suggests must name every durable store (MongoDB, PostgreSQL and
    SQLite), each a store whose ``supports_journal`` is true. Nothing connects."""
    if url == "sqlite:///":
        url += f"{tmp_path}/jobs.sqlite3"
    backend = backend_from_url(url)
    try:
        assert backend.supports_journal
    finally:
        backend.close()
    settings.DURABL = {"BACKEND": f"{__name__}.NoJournalBackend"}
    messages = [m for m in durabl_checks.check_orchestrations() if m.id == "durabl.E008"]
    assert messages, "the test app declares an orchestration"
    scheme = url.split("://", 1)[0] + "://"
    for message in messages:
        assert message.hint is not None and scheme in message.hint, message.hint
