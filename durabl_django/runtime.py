"""The process-wide queue built from ``settings.DURABL``, and enqueueing from Django code.

:func:`configure` hands a lazily built backend to :func:`durabl.set_global_backend`: no
connection, no file and no thread until the queue is first used. A bad setting leaves a
stand-in backend whose every use raises ``ImproperlyConfigured`` with the message the
system check shows, so a view calling ``durabl.get_default_queue().enqueue(...)`` fails
clearly instead of deep inside a driver.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import threading
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, cast

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from durabl import (
    BACKEND_OPERATIONS,
    Backend,
    JobEvent,
    JobQueue,
    MemoryBackend,
    backend_from_url,
    get_default_queue,
    set_global_backend,
)
from durabl import (
    validate_enqueue as durabl_validate_enqueue,
)
from durabl_django.conf import SETTING_NAME, durabl_settings, settings_problems
from durabl_django.database import SCHEME as DJANGO_SCHEME
from durabl_django.database import backend_for
from durabl_django.registry import JobSpec, registry

_declared: Callable[[], Mapping[str, JobSpec]] = registry.specs
_lock = threading.RLock()
_configured = False
_handed_out: JobQueue | None = None  # the queue get_queue() returned for this configuration
_tracing: Any = None  # the durabl.tracing instrumentation DURABL["TRACING"] put in place


def url_scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def import_setting(name: str) -> Any:
    """The object a dotted-path setting names; ``ImproperlyConfigured`` when it does not
    import (check ``durabl.E006``)."""
    path = getattr(durabl_settings, name)
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"settings.{SETTING_NAME}['{name}'] = {path!r} does not import: {exc}"
        ) from exc


#: Settings that become store options when they are set; the store named by the URL
#: parses and checks them (a store that has no use for one refuses it).
STORE_OPTIONS = {
    "DATABASE": "database",
    "COLLECTION": "collection",
    "CHANGE_STREAMS": "use_change_streams",
}


def build_backend(*, connect_timeout: float | None = None) -> Backend:
    """A backend from the settings (``BACKEND`` wins over ``URL``). Connects nothing.

    ``connect_timeout`` bounds how long the store may take to answer (the connectivity
    check passes a short one). Raises ``ImproperlyConfigured`` for any bad setting.
    """
    problems = settings_problems()
    if problems:
        raise ImproperlyConfigured(f"{problems[0].msg} ({problems[0].id})")
    if durabl_settings.BACKEND is not None:
        factory = import_setting("BACKEND")
        if not callable(factory):
            raise ImproperlyConfigured(
                f"settings.{SETTING_NAME}['BACKEND'] must name a backend class or factory, "
                f"got {factory!r}"
            )
        return cast(Backend, factory())
    url = durabl_settings.URL
    given = [name for name in STORE_OPTIONS if durabl_settings.is_set(name)]
    options: dict[str, Any] = {
        STORE_OPTIONS[name]: getattr(durabl_settings, name) for name in given
    }
    if connect_timeout is not None:
        options["connect_timeout"] = connect_timeout
    factory = backend_for if url_scheme(url) == DJANGO_SCHEME else backend_from_url
    try:
        return factory(url, **options)
    except (ValueError, TypeError) as exc:
        settings_named = "".join(f", {name}" for name in given)
        raise ImproperlyConfigured(
            f"settings.{SETTING_NAME}['URL'] = {url!r}{settings_named}: {exc}"
        ) from exc


def event_sink() -> Callable[[JobEvent], object] | None:
    if durabl_settings.EVENT_SINK is None:
        return None
    sink = import_setting("EVENT_SINK")
    if not callable(sink):
        raise ImproperlyConfigured(
            f"settings.{SETTING_NAME}['EVENT_SINK'] must name a callable, got {sink!r}"
        )
    return cast(Callable[[JobEvent], object], sink)


class MisconfiguredBackend(MemoryBackend):
    """Stands in for the backend when ``settings.DURABL`` is wrong: every store operation
    raises ``ImproperlyConfigured`` (construction stays cheap and silent, so
    ``AppConfig.ready()`` never fails and ``manage.py check`` can report the problem)."""

    def __init__(self, error: ImproperlyConfigured) -> None:
        super().__init__()
        self.error = error

    def __repr__(self) -> str:
        return f"MisconfiguredBackend({self.error})"

    def refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ImproperlyConfigured(str(self.error)) from self.error


#: Every operation of the Backend protocol refuses; reading the clock, closing and asking
#: about push pickup stay harmless. Derived from the protocol, so a new operation refuses too.
REFUSED = tuple(
    name for name in BACKEND_OPERATIONS if name not in ("now", "close", "push_unavailable")
)
for _name in REFUSED:
    setattr(MisconfiguredBackend, _name, MisconfiguredBackend.refuse)
del _name


def tracing_available() -> bool:
    """Whether opentelemetry-api is installed (``durabl[otel]``), without importing it."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:
        return False


def apply_tracing() -> None:
    """``DURABL["TRACING"] = True``: trace every queue of this process (see
    :mod:`durabl.tracing`); False undoes what an earlier True put in place. Without
    opentelemetry-api nothing happens (``durabl.E012`` says so)."""
    global _tracing
    wanted = durabl_settings.TRACING is True
    if wanted and _tracing is None and tracing_available():
        from durabl import tracing

        if tracing.is_instrumented():
            return  # the application's own instrument(): not ours to undo later
        _tracing = tracing.instrument()
    elif not wanted and _tracing is not None:
        _tracing.uninstrument()
        _tracing = None


def configure() -> None:
    """(Re)configure durabl's global queue from the settings. Never connects; never raises
    for a bad setting (the stand-in backend raises on use instead). On an immediate
    backend, registers every declared job on the queue (no threads)."""
    global _configured, _handed_out
    with _lock:
        previous, _handed_out = _handed_out, None
        try:
            backend = build_backend()
            sink = event_sink()
            timeout = durabl_settings.seconds("VISIBILITY_TIMEOUT")
        except ImproperlyConfigured as exc:
            set_global_backend(MisconfiguredBackend(exc))
        else:
            set_global_backend(backend, visibility_timeout=timeout, on_job_event=sink)
            if backend.immediate:
                # Declared jobs run inside enqueue(), also for code that calls
                # durabl.get_default_queue() directly.
                _handed_out = get_default_queue()
                try:
                    register_declared(_handed_out)
                except ImproperlyConfigured:
                    pass  # a job/task name clash: get_queue() raises it on use
        apply_tracing()
        _configured = True
    if previous is not None:
        retire(previous)


def retire(queue: JobQueue) -> None:
    """Shut down a queue built for an earlier configuration and close its backend."""
    try:
        queue.shutdown(timeout=5.0)
    finally:
        if not isinstance(queue.backend, MisconfiguredBackend):
            queue.backend.close()


def get_queue() -> JobQueue:
    """The configured default queue (``durabl.get_default_queue()``), built on first use.

    On an immediate backend (``DURABL = {"BACKEND": "durabl.ImmediateBackend"}``, for
    tests) every declared job is registered on the queue, so ``enqueue`` runs it at once.
    """
    global _handed_out
    with _lock:
        if not _configured:
            configure()
        queue = get_default_queue()
        _handed_out = queue
        if queue.immediate:
            register_declared(queue)
    if isinstance(queue.backend, MisconfiguredBackend):
        raise ImproperlyConfigured(str(queue.backend.error)) from queue.backend.error
    return queue


def use_declared_jobs(provider: Callable[[], Mapping[str, JobSpec]]) -> None:
    """Where :func:`register_declared` finds the declared job types. The app's ``ready()``
    hands in :func:`durabl_django.workers.declared_jobs` (``@job`` handlers and the
    django.tasks queues); until then, the ``@job`` registry alone."""
    global _declared
    _declared = provider


def register_declared(queue: JobQueue) -> None:
    """``queue.register`` every declared job type not registered yet (no threads)."""
    registered = queue.processors
    for spec in _declared().values():
        if spec.type not in registered:
            spec.start_on(queue.register)


def on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: a new ``DURABL`` takes effect at once."""
    if setting == SETTING_NAME:
        durabl_settings.reload()
        configure()


# -- enqueueing ---------------------------------------------------------------------------------
def enqueue(type: str, data: Any, **options: Any) -> str | None:
    """``get_queue().enqueue(type, data, **options)``: the new job id, or None when its
    dedupe slot is taken."""
    return get_queue().enqueue(type, data, **options)


def validate_enqueue(type: str, data: Any, **options: Any) -> None:
    """Raise now what ``enqueue(type, data, **options)`` would raise for a bad option or
    payload (``TypeError``/``ValueError``), without touching the store."""
    durabl_validate_enqueue(type, data, **options)


def enqueue_on_commit(
    type: str, data: Any, *, using: str | None = None, robust: bool = False, **options: Any
) -> None:
    """Enqueue after the current transaction on ``using`` commits (at once outside one);
    nothing is enqueued if it rolls back. Options and payload are validated now, so a
    mistake raises here, and the payload is copied, so later changes to ``data`` do not
    leak into the job. ``robust`` is ``transaction.on_commit``'s."""
    from django.db import transaction

    validate_enqueue(type, data, **options)
    payload = copy.deepcopy(data)
    transaction.on_commit(
        functools.partial(enqueue, type, payload, **options), using=using, robust=robust
    )
