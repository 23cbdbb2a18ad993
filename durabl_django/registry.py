"""Declared job handlers: ``@durabl_django.job("type", ...)`` and
``@durabl_django.orchestration("type", ...)`` in each app's ``jobs.py``.

Declaring records a :class:`JobSpec` and starts nothing: a web process that imports every
``jobs`` module never consumes. ``manage.py runworkers`` turns the specs into
``queue.process(...)`` calls. Mistakes are kept for the system checks instead of raised at
import: a type declared twice (``durabl.E005``) and a ``jobs`` module that fails to import
(``durabl.E004``).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from importlib import import_module
from typing import Any, TypeVar

import durabl
from durabl import Declaration, Job, JobContext
from durabl.orchestrator import DEFAULT_MAX_JOURNAL_BYTES, Body, OrchestrationHandler

Handler = Callable[[Job[Any], JobContext], object]
H = TypeVar("H", bound=Handler)
B = TypeVar("B", bound=Body)
Seconds = float | timedelta

JOBS_MODULE = "jobs"


@dataclass(frozen=True)
class JobSpec(Declaration):
    """One declared job type: what ``queue.process`` needs to run it (durabl's
    :class:`durabl.Declaration`, whose ``origin`` names the handler in messages)."""

    @property
    def is_orchestration(self) -> bool:
        """Whether the handler runs an orchestration body (its store must keep a journal)."""
        return isinstance(self.handler, OrchestrationHandler)

    def with_concurrency(self, concurrency: int) -> JobSpec:
        return replace(self, concurrency=concurrency)

    def start_on(self, start: Callable[..., object]) -> None:
        """``start(type, handler, concurrency=..., poll_interval=..., heartbeat_interval=...)``
        for this type: ``queue.process`` or ``queue.register``."""
        start(
            self.type,
            self.handler,
            concurrency=self.concurrency,
            poll_interval=self.poll_interval,
            heartbeat_interval=self.heartbeat_interval,
        )


@dataclass(frozen=True)
class ImportFailure:
    """A ``jobs`` module that raised while it was imported."""

    module: str
    error: BaseException
    traceback: str


class JobRegistry:
    """Every declared job type of this process. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, JobSpec] = {}
        self.duplicates: list[tuple[JobSpec, JobSpec]] = []
        self.import_failures: list[ImportFailure] = []

    def add(self, spec: JobSpec) -> None:
        """Record ``spec``; a second declaration of its type from another handler is kept
        in :attr:`duplicates` (the first one stays in force)."""
        with self._lock:
            first = self._specs.get(spec.type)
            if first is None or first.origin == spec.origin:  # a module imported again
                self._specs[spec.type] = spec
            elif (first, spec) not in self.duplicates:
                self.duplicates.append((first, spec))

    def specs(self) -> dict[str, JobSpec]:
        """Declared types, sorted by name."""
        with self._lock:
            return dict(sorted(self._specs.items()))

    def get(self, type: str) -> JobSpec | None:
        with self._lock:
            return self._specs.get(type)

    def record_import_failure(self, module: str, error: BaseException) -> None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        with self._lock:
            self.import_failures = [f for f in self.import_failures if f.module != module]
            self.import_failures.append(ImportFailure(module, error, text))

    def clear_import_failure(self, module: str) -> None:
        with self._lock:
            self.import_failures = [f for f in self.import_failures if f.module != module]


registry = JobRegistry()


def _check_seconds(name: str, value: object) -> None:
    if value is None:
        return
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")


def _check_process_options(
    type: str, concurrency: int, poll_interval: object, heartbeat_interval: object
) -> None:
    if not isinstance(type, str) or not type:
        raise ValueError(f"job type must be a non-empty string, got {type!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
    _check_seconds("poll_interval", poll_interval)
    _check_seconds("heartbeat_interval", heartbeat_interval)


def job(
    type: str,
    *,
    concurrency: int = 1,
    poll_interval: Seconds | None = None,
    heartbeat_interval: Seconds | None = None,
    **options: Any,
) -> Callable[[H], H]:
    """Declare ``handler(job, ctx)`` as the handler of job ``type``; starts nothing.

    ``manage.py runworkers`` runs it on ``concurrency`` worker threads with
    ``queue.process(type, handler, concurrency=..., poll_interval=...,
    heartbeat_interval=...)``. Every other option of ``@durabl.job`` (``schema``,
    ``on_dead_letter``, ``max_attempts``, ...) is accepted: the type is declared in
    durabl's own registry too, so those options apply to every queue of the process.
    The decorated function is returned unchanged.
    """
    _check_process_options(type, concurrency, poll_interval, heartbeat_interval)
    declare_in_durabl = durabl.job(
        type,
        concurrency=concurrency,
        poll_interval=poll_interval,
        heartbeat_interval=heartbeat_interval,
        **options,
    )  # a bad option raises here, at the decorator

    def declare(handler: H) -> H:
        if not callable(handler):
            raise TypeError(f"@job({type!r}) must decorate a callable, got {handler!r}")
        spec = JobSpec(type, handler, concurrency, poll_interval, heartbeat_interval)
        registry.add(spec)
        declared = registry.get(type)
        if declared is not None and declared.origin == spec.origin:  # not a duplicate
            declare_in_durabl(handler)
        return handler

    return declare


def orchestration(
    type: str,
    *,
    concurrency: int = 1,
    poll_interval: Seconds | None = None,
    heartbeat_interval: Seconds | None = None,
    step_timeout: Seconds | None = None,
    max_duration: Seconds | None = None,
    max_journal_bytes: int | None = None,
) -> Callable[[B], B]:
    """Declare ``body(job, octx)`` as the orchestration for jobs of ``type``; starts
    nothing.

    The job type's handler is ``durabl.orchestrator.OrchestrationHandler(body,
    step_timeout=..., max_duration=..., max_journal_bytes=...)``, and ``manage.py
    runworkers`` runs it like any declared job (``concurrency``, ``poll_interval`` and
    ``heartbeat_interval`` as for :func:`job`). ``step_timeout`` is each step's default
    timeout (None: the visibility timeout), ``max_duration`` bounds one run of the body
    (None: unbounded), ``max_journal_bytes`` caps the journal (None: durabl's default).
    The body is returned unchanged, so ``durabl.testing.OrchestrationHarness`` can test
    it. The store must keep a journal (check ``durabl.E008``).
    """
    _check_process_options(type, concurrency, poll_interval, heartbeat_interval)
    options: dict[str, Any] = {
        "step_timeout": step_timeout,
        "max_duration": max_duration,
        "max_journal_bytes": DEFAULT_MAX_JOURNAL_BYTES
        if max_journal_bytes is None
        else max_journal_bytes,
    }
    OrchestrationHandler(_no_body, **options)  # a bad option raises here, at the decorator

    def declare(body: B) -> B:
        if not callable(body):
            raise TypeError(f"@orchestration({type!r}) must decorate a callable, got {body!r}")
        handler = OrchestrationHandler(body, **options)
        registry.add(JobSpec(type, handler, concurrency, poll_interval, heartbeat_interval))
        return body

    return declare


def _no_body(job: Job[Any], octx: Any) -> None:
    """Stands in for a body while the options are validated."""


def autodiscover() -> None:
    """Import every installed app's ``jobs`` module (as ``autodiscover_modules("jobs")``
    does), keeping a module that raises for ``durabl.E004`` instead of failing startup."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    for app_config in apps.get_app_configs():
        if not module_has_submodule(app_config.module, JOBS_MODULE):
            continue
        name = f"{app_config.name}.{JOBS_MODULE}"
        try:
            import_module(name)
        except Exception as exc:
            registry.record_import_failure(name, exc)
        else:
            registry.clear_import_failure(name)
