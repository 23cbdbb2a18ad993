"""System checks for durabl_django.

======  =====================================================================
id      what
======  =====================================================================
E001    unknown keys in ``settings.DURABL``
E002    a value of the wrong type (or ``DURABL`` not a dict)
E003    a bad ``URL`` (scheme or format) or a setting the URL's store cannot use
E004    an app's ``jobs`` module that raised while it was imported
E005    a job type declared twice
E006    ``BACKEND`` / ``EVENT_SINK`` dotted path that does not import
E007    a ``TASKS`` entry using ``DurablBackend`` that is misconfigured
E008    an orchestration is declared but the configured store cannot keep a journal
E010    the store does not answer (only with ``manage.py check --database``)
E011    a ``django://alias`` URL whose alias is unknown or not a PostgreSQL database
E012    ``TRACING`` is True but opentelemetry-api is not installed
======  =====================================================================

Nothing here connects except :func:`check_connectivity`, which Django runs only for the
``database`` tag (``manage.py check --database default``; also ``migrate`` and the test
runner). Silence it with ``SILENCED_SYSTEM_CHECKS = ["durabl.E010"]`` where the store is
not up at deploy time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from durabl import Backend
from durabl_django.conf import SETTING_NAME, durabl_settings, settings_problems
from durabl_django.database import SCHEME as DJANGO_SCHEME
from durabl_django.database import alias_problem
from durabl_django.registry import registry
from durabl_django.runtime import (
    build_backend,
    get_queue,
    import_setting,
    tracing_available,
    url_scheme,
)

TAG = "durabl"
#: Seconds the connectivity check waits for the store.
CONNECTIVITY_TIMEOUT = 5.0
MAX_REASON = 300


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E001, E002, E003, E006, E011, E012, W001."""
    problems = settings_problems()
    errors: list[checks.CheckMessage] = [
        checks.Error(p.msg, hint=p.hint, id=p.id) for p in problems
    ]
    if problems:
        return errors  # what follows needs well-typed values
    for name in ("BACKEND", "EVENT_SINK"):
        if getattr(durabl_settings, name) is None:
            continue
        try:
            target = import_setting(name)
        except ImproperlyConfigured as exc:
            errors.append(checks.Error(str(exc), id="durabl.E006"))
            continue
        if not callable(target):
            errors.append(
                checks.Error(
                    f"settings.{SETTING_NAME}['{name}'] must name a callable, got {target!r}.",
                    id="durabl.E006",
                )
            )
    if durabl_settings.BACKEND is None:
        errors += _check_url()
    if durabl_settings.TRACING and not tracing_available():
        errors.append(
            checks.Error(
                f"settings.{SETTING_NAME}['TRACING'] is True but opentelemetry-api is not "
                "installed: no job is traced.",
                hint="pip install 'durabl[otel]', or set TRACING to False.",
                id="durabl.E012",
            )
        )
    return errors


def _check_url() -> list[checks.CheckMessage]:
    url = durabl_settings.URL
    if url_scheme(url) == DJANGO_SCHEME:
        problem = alias_problem(url)
        if problem is not None:
            return [
                checks.Error(
                    problem,
                    hint="Name an alias of settings.DATABASES that uses "
                    "django.db.backends.postgresql (with psycopg 3).",
                    id="durabl.E011",
                )
            ]
    hint = "For example 'sqlite:///durabl.sqlite3', 'mongodb://host:27017/app' or 'mongomock://'."
    try:
        backend = build_backend()  # validates the URL; connects nothing
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), hint=hint, id="durabl.E003")]
    backend.close()
    if url_scheme(url) == "sqlite" and not url.startswith("sqlite:////"):
        return [
            checks.Warning(
                f"settings.{SETTING_NAME}['URL'] = {url!r} names a SQLite file relative to "
                "the working directory: a web process and runworkers started from different "
                "directories would use different files and never see each other's jobs.",
                hint="Build an absolute path, e.g. f\"sqlite:///{BASE_DIR / 'durabl.sqlite3'}\".",
                id="durabl.W001",
            )
        ]
    return []


def check_jobs(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E004 (a ``jobs`` module that failed to import) and E005 (a type declared twice)."""
    errors: list[checks.CheckMessage] = []
    for failure in registry.import_failures:
        errors.append(
            checks.Error(
                f"{failure.module} failed to import: "
                f"{type(failure.error).__name__}: {failure.error}",
                hint=failure.traceback.rstrip(),
                obj=failure.module,
                id="durabl.E004",
            )
        )
    for first, second in registry.duplicates:
        errors.append(
            checks.Error(
                f"job type {first.type!r} is declared twice: by {first.origin} and by "
                f"{second.origin}.",
                hint="Each job type has one handler; rename one of them.",
                obj=second.origin,
                id="durabl.E005",
            )
        )
    return errors


def check_orchestrations(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E008: an orchestration is declared but the configured backend's
    ``supports_journal`` is false. Looks at the backend the queue was configured with;
    connects nothing."""
    declared = [spec for spec in registry.specs().values() if spec.is_orchestration]
    if not declared or check_settings():
        return []  # nothing to check, or the settings errors say it all
    try:
        backend = get_queue().backend
    except ImproperlyConfigured:  # pragma: no cover - check_settings() reported it
        return []
    if backend.supports_journal:
        return []
    return [
        checks.Error(
            f"orchestration {spec.type!r} ({spec.origin}) needs a store that keeps a "
            f"journal, but {backend!r} does not (its supports_journal is false).",
            hint="Use a store that keeps a journal: MongoDB (mongodb://), PostgreSQL "
            "(postgresql:// or django://<alias>) or SQLite (sqlite://), or mongomock:// in "
            "tests; or a BACKEND whose supports_journal is true; or declare the job with "
            "@durabl_django.job.",
            obj=spec.origin,
            id="durabl.E008",
        )
        for spec in declared
    ]


def check_connectivity(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """E010: the store answers ``startup()`` and a count within a few seconds."""
    if not databases or check_settings():
        return []  # not asked for, or the settings errors say it all
    try:
        if durabl_settings.BACKEND is None:
            # The store gives up first, so the report carries its reason, not a timeout.
            backend = build_backend(connect_timeout=CONNECTIVITY_TIMEOUT * 0.6)
        else:
            backend = build_backend()
    except ImproperlyConfigured:  # pragma: no cover - check_settings() reported it
        return []
    # A BACKEND factory may hand out a shared instance: close only what the URL built.
    error = _probe(backend, CONNECTIVITY_TIMEOUT, close=durabl_settings.BACKEND is None)
    if error is None:
        return []
    return [
        checks.Error(
            f"the durabl store {backend!r} did not answer: {error}",
            hint="Check DURABL['URL'] and that the server is up and reachable from here.",
            id="durabl.E010",
        )
    ]


def _probe(backend: Backend, timeout: float, *, close: bool) -> str | None:
    """Run ``startup()`` and a count in a daemon thread; a problem, or None when fine."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            backend.startup()
            backend.count_jobs(status="pending")
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)
        finally:
            if close:
                try:
                    backend.close()
                except Exception:
                    pass

    thread = threading.Thread(target=run, name="durabl-check-connectivity", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"no answer within {timeout:g} s"
    exc = outcome[0]
    if exc is None:
        return None
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > MAX_REASON:
        text = text[: MAX_REASON - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def register() -> None:
    """Register every check (idempotent: the registry keeps a set)."""
    checks.register(check_settings, TAG)
    checks.register(check_jobs, TAG)
    checks.register(check_orchestrations, TAG)
    checks.register(check_connectivity, checks.Tags.database)
