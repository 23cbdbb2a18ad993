"""Hooks around every managed run (``queue.add_run_hook(hook)``), and the event sink.

A hook is ``hook(job, proceed) -> object``: it does what it must before the run, calls
``proceed()`` exactly once (which runs the handler, or the next hook in), and returns its
value. Hooks nest in the order they were added: the first added is the outermost.

The run's error is what escapes the outermost hook; if the handler raised but a hook
swallowed the exception, the handler's error still counts, so a hook cannot turn a failed
attempt into a success. A hook that raises before proceeding, or returns without
proceeding, fails the attempt like a handler error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from durabl.model.job import Job, JobEvent

Proceed = Callable[[], object]
RunHook = Callable[[Job[Any], Proceed], object]


def emit_event(
    sink: Callable[[JobEvent], object] | None, event: JobEvent, logger: logging.Logger
) -> None:
    """Send ``event`` to ``sink`` (None: nobody listens); a failing sink is logged and
    never affects a job."""
    if sink is None:
        return
    try:
        sink(event)
    except Exception:
        logger.exception("on_job_event sink raised for %s event", event.kind)


class HookNotProceededError(RuntimeError):
    """A run hook returned without calling ``proceed()``: the handler never ran."""


class RunHooks:
    """The ordered hooks of one queue. Adding and removing is thread-safe; a run uses the
    hooks in place when it starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hooks: tuple[RunHook, ...] = ()

    def add(self, hook: RunHook) -> Callable[[], None]:
        """Wrap every later run in ``hook``; returns a function that removes it."""
        if not callable(hook):
            raise TypeError(f"a run hook must be callable, got {hook!r}")
        entry = _Entry(hook)  # distinct per add(), so the same hook may be added twice

        with self._lock:
            self._hooks = (*self._hooks, entry)

        def remove() -> None:
            with self._lock:
                self._hooks = tuple(h for h in self._hooks if h is not entry)

        return remove

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def call(self, job: Job[Any], run: Proceed) -> object:
        """``run()`` inside every hook. Raises what escapes, or the handler's own error
        when a hook swallowed it."""
        hooks = self._hooks
        if not hooks:
            return run()
        raised: list[BaseException] = []

        def handler() -> object:
            try:
                return run()
            except BaseException as exc:
                raised.append(exc)
                raise

        call: Proceed = handler
        for hook in reversed(hooks):
            call = _layer(hook, job, call)
        result = call()
        if raised:
            raise raised[0]
        return result


class _Entry:
    __slots__ = ("hook",)

    def __init__(self, hook: RunHook) -> None:
        self.hook = hook

    def __call__(self, job: Job[Any], proceed: Proceed) -> object:
        return self.hook(job, proceed)

    def __repr__(self) -> str:
        return repr(self.hook)


def _layer(hook: RunHook, job: Job[Any], inner: Proceed) -> Proceed:
    def proceed_once() -> object:
        if calls:
            raise RuntimeError(f"run hook {hook!r} called proceed() more than once")
        calls.append(True)
        return inner()

    calls: list[bool] = []

    def layer() -> object:
        result = hook(job, proceed_once)
        if not calls:
            raise HookNotProceededError(f"run hook {hook!r} returned without calling proceed()")
        return result

    return layer
