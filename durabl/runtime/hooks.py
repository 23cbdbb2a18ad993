"""Hooks around every managed run and every enqueue, and the event sink.

A run hook (``queue.add_run_hook(hook)``) is ``hook(job, proceed) -> object``: it does
what it must before the run, calls ``proceed()`` exactly once (which runs the handler, or
the next hook in), and returns its value. The run's error is what escapes the outermost
hook; if the handler raised but a hook swallowed the exception, the handler's error still
counts, so a hook cannot turn a failed attempt into a success. A hook that raises before
proceeding, or returns without proceeding, fails the attempt like a handler error.

An enqueue hook (``queue.add_enqueue_hook(hook)``) is ``hook(new_job, proceed) -> id``:
it sees the checked job before it is stored and calls ``proceed(new_job)`` exactly once,
with that job or a copy whose ``trace_context`` it set (``new_job.with_trace_context``
or ``dataclasses.replace``; any other change is a ``ValueError``: the rest was checked
already). ``proceed`` returns the stored job's id, or None when a dedupe key already
covered it, and the enqueue returns that, whatever the hook returns. A hook that raises
before proceeding stores nothing; one that raises after it leaves the job stored
(``claim_or_enqueue`` hands its claim back) and the enqueue raises.

Hooks nest in the order they were added: the first added is the outermost. The
process-wide hooks (:func:`durabl.add_run_hook`, :func:`durabl.add_enqueue_hook`) wrap
every queue's, and apply to queues made before they were added too.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from functools import partial
from typing import Any, Generic, TypeVar

from durabl.model.job import Job
from durabl.model.options import NewJob
from durabl.model.reports import EVENT_KINDS, JobEvent

Proceed = Callable[[], object]
RunHook = Callable[[Job[Any], Proceed], object]
EnqueueProceed = Callable[[NewJob], "str | None"]
EnqueueHook = Callable[[NewJob, EnqueueProceed], "str | None"]
H = TypeVar("H", bound=Callable[..., Any])


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
    """A hook returned without calling ``proceed()``: the handler never ran (a run hook),
    or nothing was stored (an enqueue hook)."""


class _Hooks(Generic[H]):
    """Ordered hooks, inside those of ``outer`` (the process-wide ones). Adding and
    removing is thread-safe; a call uses the hooks in place when it starts."""

    kind = "a hook"

    def __init__(self, outer: _Hooks[H] | None = None) -> None:
        self._outer = outer
        self._lock = threading.Lock()
        self.own: tuple[H, ...] = ()

    def add(self, hook: H) -> Callable[[], None]:
        """Wrap every later call in ``hook``; returns a function that removes it."""
        self._check(hook)
        return self._insert(_Entry(hook))

    def _check(self, hook: object) -> None:
        if not callable(hook):
            raise TypeError(f"{self.kind} must be callable, got {hook!r}")

    def _insert(self, entry: Any) -> Callable[[], None]:
        """Add ``entry`` (distinct per add(), so the same hook may be added twice) last;
        returns a function that removes it."""
        with self._lock:
            self.own = (*self.own, entry)
            self._changed()

        def remove() -> None:
            with self._lock:
                self.own = tuple(h for h in self.own if h is not entry)
                self._changed()

        return remove

    def _changed(self) -> None:
        """Called under the lock once ``own`` changed."""

    @property
    def _hooks(self) -> tuple[H, ...]:
        outer = self._outer
        return self.own if outer is None or not outer.own else (*outer.own, *self.own)

    def __bool__(self) -> bool:  # asked once per run: attribute reads only
        outer = self._outer
        return bool(self.own or (outer is not None and outer.own))


class RunHooks(_Hooks[RunHook]):
    """The ordered run hooks of one queue (or of the process)."""

    kind = "a run hook"

    def call(self, job: Job[Any], run: Proceed) -> object:
        """``run()`` inside every hook. Raises what escapes, or the handler's own error
        when a hook swallowed it."""
        hooks = self._hooks
        if not hooks:
            return run()
        chain = _RunChain(hooks, job, run)
        result = chain.enter(0)
        if chain.raised is not None:
            raise chain.raised
        return result


class EnqueueHooks(_Hooks[EnqueueHook]):
    """The ordered enqueue hooks of one queue (or of the process)."""

    kind = "an enqueue hook"

    def call(self, job: NewJob, store: EnqueueProceed) -> str | None:
        """``store(job)`` inside every hook, each passing on the job it was given or a
        changed copy; what the innermost store returned."""
        hooks = self._hooks
        if not hooks:
            return store(job)
        call = store
        for hook in reversed(hooks):
            call = _enqueue_layer(hook, call)
        return call(job)

    def call_many(
        self, jobs: Sequence[NewJob], store_many: Callable[[list[NewJob]], list[str | None]]
    ) -> list[str | None]:
        """``store_many`` of ``jobs`` inside every hook of each: each job's hooks run in
        turn, in a copy of the caller's context (so a hook sees the caller's, never the
        previous job's), and each one's ``proceed`` enters the next job's hooks; past the
        last job, one ``store_many`` of what the hooks passed on, whose ids the proceeds
        then return. A nest holds as many jobs as a bounded stack allows; a batch is
        written one nest at a time."""
        hooks = self._hooks
        if not hooks:
            return store_many(list(jobs))
        nest = max(1, HOOK_FRAMES // (3 * len(hooks) + 3))  # about 3 frames per hook a job
        ids: list[str | None] = []
        caller = contextvars.copy_context()
        for start in range(0, len(jobs), nest):
            ids.extend(self._nest(jobs[start : start + nest], store_many, caller))
        return ids

    def _nest(
        self,
        jobs: Sequence[NewJob],
        store_many: Callable[[list[NewJob]], list[str | None]],
        caller: contextvars.Context,
    ) -> list[str | None]:
        passed: list[NewJob] = []
        stored: list[str | None] = []

        def enter(position: int) -> None:
            if position == len(jobs):
                stored.extend(store_many(passed))
                return

            def proceed(job: NewJob) -> str | None:
                passed.append(job)
                enter(position + 1)
                return stored[position]

            caller.copy().run(self.call, jobs[position], proceed)

        enter(0)
        return stored


#: The stack frames a nest of :meth:`EnqueueHooks.call_many` may take (Python's limit is
#: 1,000 by default, and the caller has its own).
HOOK_FRAMES = 450

#: What an enqueue hook may not change: every field but the trace context.
_KEPT_FIELDS = tuple(f.name for f in fields(NewJob) if f.name != "trace_context")


def _enqueue_layer(hook: EnqueueHook, inner: EnqueueProceed) -> EnqueueProceed:
    def layer(job: NewJob) -> str | None:
        stored: list[str | None] = []

        def proceed_once(changed: NewJob) -> str | None:
            if stored:
                raise RuntimeError(f"enqueue hook {hook!r} called proceed() more than once")
            if not isinstance(changed, NewJob):
                raise TypeError(
                    f"enqueue hook {hook!r} must pass a NewJob to proceed(), got {changed!r}"
                )
            if changed is not job and any(
                getattr(changed, name) is not getattr(job, name) for name in _KEPT_FIELDS
            ):  # with_trace_context() and replace() keep the very objects of the other fields
                raise ValueError(
                    f"enqueue hook {hook!r} changed the job: a hook may set only its "
                    "trace_context (the rest was checked before the hooks ran)"
                )
            result = inner(changed)
            stored.append(result)
            return result

        hook(job, proceed_once)
        if not stored:
            raise HookNotProceededError(
                f"enqueue hook {hook!r} returned without calling proceed(): nothing was stored"
            )
        return stored[0]  # what the store did, whatever the hook returned

    return layer


class EventSinks(_Hooks[Callable[[JobEvent], object]]):
    """The event sinks added to one queue (``queue.add_event_sink``), beside its
    ``on_job_event``. A sink may take only some kinds: then no event of another kind is
    built for it (``wants(kind)`` is asked before an event is made)."""

    kind = "an event sink"

    def __init__(self) -> None:
        super().__init__()
        #: The kinds some sink takes; None: every kind (a sink took them all, or none).
        self._wanted: frozenset[str] | None = frozenset()

    def add(
        self, hook: Callable[[JobEvent], object], kinds: Iterable[str] | None = None
    ) -> Callable[[], None]:
        """Send every later event (of ``kinds``, None: of every kind) to ``hook``;
        returns a function that removes it."""
        wanted = None if kinds is None else _event_kinds(kinds)
        self._check(hook)
        return self._insert(_SinkEntry(hook, wanted))

    def _changed(self) -> None:
        self._wanted = _union(self.own)

    def wants(self, kind: str) -> bool:
        """Whether some sink takes events of ``kind``."""
        wanted = self._wanted
        return wanted is None or kind in wanted

    def emit(self, event: JobEvent, logger: logging.Logger) -> None:
        kind = event.kind
        for entry in self.own:
            kinds = entry.kinds  # type: ignore[attr-defined]
            if kinds is None or kind in kinds:
                emit_event(entry.hook, event, logger)  # type: ignore[attr-defined]


def _event_kinds(kinds: Iterable[str]) -> frozenset[str]:
    if isinstance(kinds, str):
        raise TypeError(f"kinds must be a collection of event kinds, not the string {kinds!r}")
    wanted = frozenset(kinds)
    unknown = sorted(k for k in wanted if k not in EVENT_KINDS)
    if unknown:
        raise ValueError(
            f"unknown event kind(s) {', '.join(map(repr, unknown))}; "
            f"the kinds are {', '.join(sorted(EVENT_KINDS))}"
        )
    return wanted


def _union(sinks: tuple[Any, ...]) -> frozenset[str] | None:
    wanted: set[str] = set()
    for sink in sinks:
        if sink.kinds is None:
            return None
        wanted |= sink.kinds
    return frozenset(wanted)


#: The hooks around every queue's runs and enqueues, in this process.
process_run_hooks = RunHooks()
process_enqueue_hooks = EnqueueHooks()


def add_run_hook(hook: RunHook) -> Callable[[], None]:
    """Wrap every managed run of every queue in this process in ``hook(job, proceed)``,
    outside each queue's own run hooks (see :meth:`durabl.JobQueue.add_run_hook`).
    Returns a function that removes it."""
    return process_run_hooks.add(hook)


def add_enqueue_hook(hook: EnqueueHook) -> Callable[[], None]:
    """Wrap every enqueue of every queue in this process in ``hook(new_job, proceed)``,
    outside each queue's own enqueue hooks (see :meth:`durabl.JobQueue.add_enqueue_hook`).
    Returns a function that removes it."""
    return process_enqueue_hooks.add(hook)


class _Entry:
    __slots__ = ("hook",)

    def __init__(self, hook: Callable[..., Any]) -> None:
        self.hook = hook

    def __call__(self, *args: Any) -> Any:
        return self.hook(*args)

    def __repr__(self) -> str:
        return repr(self.hook)


class _SinkEntry(_Entry):
    __slots__ = ("kinds",)

    def __init__(self, hook: Callable[..., Any], kinds: frozenset[str] | None) -> None:
        super().__init__(hook)
        self.kinds = kinds


class _RunChain:
    """One run through its hooks: hook ``i`` gets a ``proceed`` that enters level
    ``i + 1`` (the handler past the last hook), at most once. One object per run rather
    than closures per hook: a run is a worker's hot path."""

    __slots__ = ("entered", "hooks", "job", "raised", "run")

    def __init__(self, hooks: tuple[RunHook, ...], job: Job[Any], run: Proceed) -> None:
        self.hooks = hooks
        self.job = job
        self.run = run
        #: The deepest level a proceed() entered (0: none yet).
        self.entered = 0
        #: The handler's own error, kept in case a hook swallows it.
        self.raised: BaseException | None = None

    def enter(self, level: int) -> object:
        hooks = self.hooks
        if level == len(hooks):
            try:
                return self.run()
            except BaseException as exc:
                self.raised = exc
                raise
        hook = hooks[level]
        result = hook(self.job, partial(self.proceed, level + 1))
        if self.entered <= level:
            raise HookNotProceededError(f"run hook {hook!r} returned without calling proceed()")
        return result

    def proceed(self, level: int) -> object:
        if self.entered >= level:
            hook = self.hooks[level - 1]
            raise RuntimeError(f"run hook {hook!r} called proceed() more than once")
        self.entered = level
        return self.enter(level)
