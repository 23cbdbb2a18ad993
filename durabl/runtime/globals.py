"""The process-wide default queue."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from durabl.model.clock import Seconds
from durabl.model.options import DEFAULT_VISIBILITY_TIMEOUT
from durabl.model.reports import JobEvent
from durabl.runtime.queue import JobQueue
from durabl.stores.base import Backend


@dataclass
class _GlobalState:
    backend: Backend | None = None
    options: dict[str, Any] = field(default_factory=dict)
    queue: JobQueue | None = None


_lock = threading.RLock()
_state = _GlobalState()
_scoped = False


def set_global_backend(
    backend: Backend,
    *,
    logger: logging.Logger | None = None,
    visibility_timeout: Seconds = DEFAULT_VISIBILITY_TIMEOUT,
    on_job_event: Callable[[JobEvent], object] | None = None,
) -> None:
    """Capture the backend and options for :func:`get_default_queue`. The default queue
    is built lazily on first use; nothing connects here."""
    global _state
    with _lock:
        _state = _GlobalState(
            backend,
            {
                "logger": logger,
                "visibility_timeout": visibility_timeout,
                "on_job_event": on_job_event,
            },
        )


def get_default_queue() -> JobQueue:
    """The process-wide queue, created from :func:`set_global_backend`'s configuration."""
    with _lock:
        if _state.queue is None:
            if _state.backend is None:
                raise RuntimeError(
                    "no global backend: call durabl.set_global_backend(...) first "
                    "(durabl_django does this from settings.DURABL)"
                )
            _state.queue = JobQueue(_state.backend, **_state.options)
        return _state.queue


def create_job_queue(backend: Backend | None = None, **overrides: Any) -> JobQueue:
    """A new queue from the global configuration, with ``backend`` and options overridden."""
    with _lock:
        chosen = backend if backend is not None else _state.backend
        if chosen is None:
            raise RuntimeError("no backend given and no global backend set")
        return JobQueue(chosen, **{**_state.options, **overrides})


@contextlib.contextmanager
def global_queue(backend: Backend, **options: Any) -> Iterator[JobQueue]:
    """A temporary global configuration (tests). Nesting raises RuntimeError; the exact
    prior state comes back afterwards and only this scope's queue is shut down."""
    global _state, _scoped
    with _lock:
        if _scoped:
            raise RuntimeError("global_queue() scopes cannot overlap")
        prior = _state
        set_global_backend(backend, **options)  # a bad option raises before the scope opens
        _scoped = True
    try:
        yield get_default_queue()
    finally:
        with _lock:
            own = _state.queue
            _state = prior
            _scoped = False
        if own is not None:
            own.shutdown(timeout=5.0)
