"""Push pickup: one change-stream watcher per queue, routed to the queue's processors.

Started by the first ``process()`` on a store that offers push pickup; processors left on
the default poll interval follow its mode (``safety_poll_interval`` while push is up, the
normal interval, polling at once, when it is not). The pickup is the watcher's
:class:`durabl.stores.base.PushListener`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field

from durabl.model.options import DEFAULT_POLL_INTERVAL
from durabl.model.reports import JobEvent, PickupMode, QueueHealth
from durabl.runtime.worker import Processor
from durabl.stores.base import Backend, PushSource, PushWatcher

PUSH_JOIN_TIMEOUT = 5.0


@dataclass(eq=False)
class PushPickup:
    """Routes a store's push notifications to the processors of one queue.

    ``processors`` is the queue's live map of processors by type, read under ``lock``
    (the queue's lock, so a processor registered while the mode changes gets the right
    interval); ``closing`` tells whether the queue is shutting down.
    """

    backend: Backend
    processors: Mapping[str, Processor]
    _: KW_ONLY
    lock: threading.RLock
    closing: Callable[[], bool]
    sink: Callable[[JobEvent], None]
    logger: logging.Logger
    _watcher: PushWatcher | None = field(default=None, init=False)
    _types: frozenset[str] = field(default=frozenset(), init=False)
    _mode: PickupMode = field(default="poll", init=False)
    _default_interval: set[str] = field(default_factory=set, init=False)

    @property
    def mode(self) -> PickupMode:
        return self._mode

    def default_poll_interval(self, type: str | None = None) -> float:
        """The poll interval of a processor that did not choose one; with ``type``, that
        processor follows the pickup mode from now on."""
        with self.lock:
            if type is not None:
                self._default_interval.add(type)
            backend = self.backend
            if self._mode == "push" and isinstance(backend, PushSource):
                return float(backend.safety_poll_interval)
            return DEFAULT_POLL_INTERVAL

    def route(self, type: str) -> None:
        """Route push notifications for ``type``; start the watcher on the first call when
        the store offers push pickup (``supports_push`` after its startup check)."""
        backend = self.backend
        with self.lock:
            self._types = self._types | {type}
            if self._watcher is not None or self.closing():
                return
            if not isinstance(backend, PushSource) or not backend.supports_push:
                return
            watcher = backend.open_push(self)
            self._watcher = watcher
        watcher.start()

    def stop(self, timeout: float = PUSH_JOIN_TIMEOUT) -> None:
        """Stop the watcher, if any, waiting up to ``timeout``: no wake-ups after this."""
        with self.lock:
            watcher = self._watcher
        if watcher is not None and not watcher.stop(timeout):
            self.logger.warning("the change-stream watcher did not stop within %.1fs", timeout)

    def health(self) -> QueueHealth:
        """See :meth:`durabl.JobQueue.is_healthy`."""
        with self.lock:
            watcher = self._watcher
            processing = tuple(sorted(self._types))
        healthy = not self.closing()
        if watcher is not None:
            status = watcher.status()
            return QueueHealth(healthy, status.pickup, status.reason, processing, status.details)
        backend = self.backend
        unavailable = backend.push_unavailable()
        if unavailable is not None:
            reason = unavailable
        elif not healthy:
            reason = "the queue is shutting down"
        elif not backend.supports_push:
            reason = "push pickup is not verified yet (the store's startup() has not run)"
        else:
            reason = "push starts with the first process() call"
        return QueueHealth(healthy, "poll", reason, processing)

    # -- the PushListener the watcher calls --------------------------------------------------
    def push_types(self) -> frozenset[str]:
        return self._types

    def push_due(self, type: str, count: int) -> None:
        """Wake the processor of ``type`` if it has a free slot; otherwise it polls again
        as soon as one of its runs finishes."""
        processor = self.processors.get(type)
        if processor is None or self.closing():
            return
        if processor.free_slots() <= 0:
            processor.note_due()
        elif count > 0:
            processor.wake(count)
        else:
            processor.poll_soon()

    def push_mode(self, mode: PickupMode, reason: str) -> None:
        """Processors on the default interval poll every ``safety_poll_interval`` while
        push is up, and return to the normal interval (polling at once) when it is not."""
        with self.lock:
            if mode == self._mode:
                return
            self._mode = mode
            interval = self.default_poll_interval()
            targets = [p for t, p in self.processors.items() if t in self._default_interval]
        self.logger.info("job pickup is now %s: %s", mode, reason)
        for processor in targets:
            processor.poll_interval = interval
            if mode == "poll":
                processor.poll_soon()

    def push_closing(self) -> bool:
        return self.closing()

    def emit(self, event: JobEvent) -> None:
        self.sink(event)
