"""settings.DURABL: lazy typed reads, defaults, override_settings, the global queue."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import durabl
import durabl_django
from durabl import DummyBackend, ImmediateBackend, JobEvent, MongoJobQueue, SqliteJobQueue
from durabl_django.conf import DEFAULTS, DurablSettings, durabl_settings

EVENTS: list[JobEvent] = []


def record_event(event: JobEvent) -> None:
    EVENTS.append(event)


def test_defaults_apply_to_every_key_not_given() -> None:
    with override_settings(DURABL={}):
        assert durabl_settings.URL == "sqlite:///durabl.sqlite3"
        assert durabl_settings.DATABASE is None
        assert durabl_settings.COLLECTION == "durabl_jobs"
        assert durabl_settings.VISIBILITY_TIMEOUT == 300
        assert durabl_settings.CHANGE_STREAMS is False
        assert durabl_settings.EVENT_SINK is None
        assert durabl_settings.BACKEND is None
        assert durabl_settings.ADMIN_LAG_THRESHOLD == 300
        assert durabl_settings.SHUTDOWN_TIMEOUT == 30
        assert durabl_settings.SCHEDULES == {}
        assert durabl_settings.METRICS_TOKEN is None
        assert durabl_settings.TRACING is False
    assert set(DEFAULTS) == {
        "URL",
        "DATABASE",
        "COLLECTION",
        "VISIBILITY_TIMEOUT",
        "CHANGE_STREAMS",
        "EVENT_SINK",
        "BACKEND",
        "ADMIN_LAG_THRESHOLD",
        "SHUTDOWN_TIMEOUT",
        "SCHEDULES",
        "METRICS_TOKEN",
        "TRACING",
    }


def test_missing_setting_means_defaults(settings: Any) -> None:
    del settings.DURABL  # sends no setting_changed: read through a fresh object
    fresh = DurablSettings()
    assert DEFAULTS["URL"] == fresh.URL
    assert fresh.SHUTDOWN_TIMEOUT == 30


def test_override_settings_resets_cached_values(durabl_store: str) -> None:
    assert durabl_store == durabl_settings.URL
    with override_settings(DURABL={"URL": "mongomock://other", "ADMIN_LAG_THRESHOLD": 5}):
        assert durabl_settings.URL == "mongomock://other"
        assert durabl_settings.ADMIN_LAG_THRESHOLD == 5
    assert durabl_store == durabl_settings.URL
    assert durabl_settings.ADMIN_LAG_THRESHOLD == 300


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NOPE"):
        durabl_settings.NOPE  # noqa: B018


def test_durations_accept_timedelta(settings: Any) -> None:
    settings.DURABL = {"URL": "mongomock://x", "VISIBILITY_TIMEOUT": timedelta(minutes=2)}
    assert durabl_settings.seconds("VISIBILITY_TIMEOUT") == 120.0
    assert durabl_django.get_queue().visibility_timeout == 120.0


def test_get_queue_is_durabls_default_queue_from_settings(durabl_store: str) -> None:
    queue = durabl_django.get_queue()
    assert queue is durabl.get_default_queue()
    assert queue is durabl_django.get_queue()
    assert isinstance(queue.backend, MongoJobQueue)
    assert queue.visibility_timeout == 300


def test_override_settings_reconfigures_the_global_queue(settings: Any) -> None:
    before = durabl_django.get_queue()
    settings.DURABL = {"URL": "mongomock://elsewhere", "VISIBILITY_TIMEOUT": 60}
    after = durabl_django.get_queue()
    assert after is not before
    assert after.visibility_timeout == 60
    assert before.draining is not None and before.draining.done()  # the old one was retired


def test_sqlite_url_builds_a_sqlite_backend(settings: Any, tmp_path: Any) -> None:
    settings.DURABL = {"URL": f"sqlite:///{tmp_path}/jobs.sqlite3"}
    queue = durabl_django.get_queue()
    assert isinstance(queue.backend, SqliteJobQueue)
    assert not (tmp_path / "jobs.sqlite3").exists()  # nothing opened until used
    assert queue.enqueue("touch", {"path": "x"})
    assert (tmp_path / "jobs.sqlite3").exists()


def test_mongodb_options_reach_the_backend(settings: Any) -> None:
    settings.DURABL = {
        "URL": "mongodb://127.0.0.1:1/fromurl",
        "DATABASE": "app",
        "COLLECTION": "my_jobs",
    }
    backend = durabl_django.get_queue().backend
    assert isinstance(backend, MongoJobQueue)
    assert backend.col.database.name == "app"
    assert backend.col.name == "my_jobs"


@pytest.mark.parametrize(
    ("path", "cls"),
    [("durabl.ImmediateBackend", ImmediateBackend), ("durabl.DummyBackend", DummyBackend)],
)
def test_backend_setting_overrides_url(settings: Any, path: str, cls: type) -> None:
    settings.DURABL = {"URL": "not a url", "BACKEND": path}
    assert type(durabl_django.get_queue().backend) is cls


def test_immediate_backend_runs_handlers_inside_enqueue(settings: Any) -> None:
    settings.DURABL = {"BACKEND": "durabl.ImmediateBackend"}
    queue = durabl_django.get_queue()
    seen: list[Any] = []
    queue.process("inline", lambda job, ctx: seen.append(job.data))
    durabl_django.enqueue("inline", {"n": 1})
    assert seen == [{"n": 1}]


def test_event_sink_receives_job_events(settings: Any) -> None:
    settings.DURABL = {"URL": "mongomock://sink", "EVENT_SINK": f"{__name__}.record_event"}
    EVENTS.clear()
    queue = durabl_django.get_queue()
    queue.register("evented", lambda job, ctx: None)
    queue.enqueue("evented", {})
    queue.run_pending()
    assert [e.kind for e in EVENTS] == ["claimed", "started", "completed"]


@pytest.mark.parametrize(
    "bad",
    [
        {"URL": "redis://nope"},
        {"URL": 42},
        {"VISIBILITY_TIMEOUT": -1},
        {"URLL": "mongomock://"},
        {"BACKEND": "no.such.Backend"},
        {"EVENT_SINK": "no.such.sink"},
    ],
)
def test_bad_setting_raises_improperly_configured_on_use(settings: Any, bad: Any) -> None:
    settings.DURABL = bad
    with pytest.raises(ImproperlyConfigured):
        durabl_django.get_queue()
    with pytest.raises(ImproperlyConfigured):
        durabl_django.enqueue("touch", {})
    # durabl's own entry point fails just as clearly, never deep in a driver
    with pytest.raises(ImproperlyConfigured):
        durabl.get_default_queue().enqueue("touch", {})


def test_settings_not_a_dict_is_improperly_configured(settings: Any) -> None:
    settings.DURABL = "mongomock://"
    with pytest.raises(ImproperlyConfigured, match="must be a dict"):
        durabl_django.get_queue()


def test_fixing_the_setting_recovers(settings: Any) -> None:
    settings.DURABL = {"URL": "bogus"}
    with pytest.raises(ImproperlyConfigured):
        durabl_django.get_queue()
    settings.DURABL = {"URL": "mongomock://fixed"}
    assert durabl_django.get_queue().enqueue("touch", {})


def test_a_misconfigured_backend_refuses_every_store_operation() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from durabl import BACKEND_OPERATIONS
    from durabl_django.runtime import MisconfiguredBackend

    backend = MisconfiguredBackend(ImproperlyConfigured("bad DURABL"))
    operations = list(BACKEND_OPERATIONS)
    assert {"complete_many", "append_journal", "mark_started", "enqueue"} <= set(operations)
    for name in operations:
        if name in ("now", "close", "push_unavailable"):
            getattr(backend, name)()  # harmless
            continue
        with pytest.raises(ImproperlyConfigured, match="bad DURABL"):
            getattr(backend, name)("x")
