"""The process-wide registry of declared job types (``@durabl.job``, ``durabl_django.job``).

A declaration records a handler, how to process it (concurrency, poll and heartbeat
intervals) and its :class:`~durabl.model.declared.TypeOptions`. Declaring does no I/O and
starts nothing: every :class:`~durabl.runtime.queue.JobQueue` of the process reads the
registry when it enqueues or runs a job of a declared type, and
``queue.process_declared()`` starts the processors.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durabl.model.abort import Handler
from durabl.model.clock import SYSTEM_CLOCK, Seconds
from durabl.model.declared import TypeOptions
from durabl.model.options import build_new_job


def origin(handler: object) -> str:
    """``module.qualname`` of a handler, for messages."""
    module = getattr(handler, "__module__", None) or "?"
    name = getattr(handler, "__qualname__", None) or repr(handler)
    return f"{module}.{name}"


@dataclass(frozen=True)
class Declaration:
    """One declared job type: its handler, how to process it (``queue.process``'s
    ``concurrency``, ``poll_interval``, ``heartbeat_interval``), and its per-type options
    (None: the library's defaults). ``origin`` names the handler, for messages."""

    type: str
    handler: Handler
    concurrency: int = 1
    poll_interval: Seconds | None = None
    heartbeat_interval: Seconds | None = None
    options: TypeOptions | None = None

    @property
    def origin(self) -> str:
        return origin(self.handler)


class DuplicateDeclarationError(ValueError):
    """A job type declared a second time with another handler."""


def check_process_options(
    concurrency: int, poll_interval: Seconds | None, heartbeat_interval: Seconds | None
) -> None:
    """The checks ``queue.process`` makes, made at the declaration instead."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
    for name, value in (
        ("poll_interval", poll_interval),
        ("heartbeat_interval", heartbeat_interval),
    ):
        if value is None:
            continue
        seconds: Any = value.total_seconds() if isinstance(value, timedelta) else value
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")


class Registry:
    """Every declared job type of this process. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._declared: dict[str, Declaration] = {}

    def add(self, declaration: Declaration) -> None:
        """Record ``declaration``. The same handler declared again (a module imported
        twice) replaces the first; another handler for a declared type raises
        :class:`DuplicateDeclarationError` (a ``ValueError``)."""
        with self._lock:
            first = self._declared.get(declaration.type)
            if first is not None and first.origin != declaration.origin:
                raise DuplicateDeclarationError(
                    f"job type {declaration.type!r} is already declared by {first.origin}; "
                    f"{declaration.origin} cannot declare it too"
                )
            self._declared[declaration.type] = declaration

    def get(self, type: str) -> Declaration | None:
        with self._lock:
            return self._declared.get(type)

    def options(self, type: str) -> TypeOptions | None:
        declaration = self.get(type)
        return None if declaration is None else declaration.options

    def types(self) -> list[str]:
        """The declared types, sorted."""
        with self._lock:
            return sorted(self._declared)

    def remove(self, type: str) -> bool:
        """Forget a declaration (tests); False when there was none."""
        with self._lock:
            return self._declared.pop(type, None) is not None


#: The registry of this process.
registry = Registry()


def declared_types() -> list[str]:
    """``durabl.declared_types()``: every job type declared in this process, sorted."""
    return registry.types()


def validate_enqueue(type: str, data: Any, **options: Any) -> None:
    """``durabl.validate_enqueue``: check a job and its enqueue options as
    ``JobQueue.enqueue`` would, the type's declared defaults and schema included, writing
    nothing: ``PayloadValidationError`` for data its schema refuses, ``TypeError`` for a
    payload no store can hold, ``ValueError`` for a bad option, ``DocumentTooLargeError``
    over the size budget. For callers that enqueue later (for example after a database
    transaction commits) and want errors at the call site."""
    given = {name: value for name, value in options.items() if value is not None}
    declared = registry.options(type)
    if declared is not None:
        data = declared.stored_data(data)
        given = declared.enqueue_options(given)
    build_new_job(type, data, now=SYSTEM_CLOCK.now(), **given)


def get_declaration(type: str) -> Declaration | None:
    """``durabl.get_declaration(type)``: how ``type`` was declared in this process
    (``.handler``, ``.concurrency``, ``.poll_interval``, ``.heartbeat_interval``,
    ``.options``), or None."""
    return registry.get(type)
