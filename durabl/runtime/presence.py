"""A queue's entry in the live workers registry (docs/operations.md, "Workers").

A queue that runs processors records itself in the store and refreshes the entry every
heartbeat interval on one named thread, ``durabl-presence``: one write per interval per
queue, however many types and worker threads it has, and no store operation per job. The
interval is the shortest heartbeat interval of its processors. Every
:data:`PRUNE_EVERY` seconds the same thread also removes the entries of processes gone for
an hour (``durabl.model.workers.REMOVE_AFTER``). The drain stops the thread at its end,
and the thread's last act is removing the queue's own entry.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import datetime

from durabl.model.workers import WorkerInfo, removal_cutoff, with_states
from durabl.runtime.worker import Processor
from durabl.stores.base import Backend

logger = logging.getLogger(__name__)

#: How often (seconds) a live queue removes the entries of long-gone processes.
PRUNE_EVERY = 600.0


def new_worker_id() -> str:
    """``host:pid:random``: two queues of one process are two entries."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Presence:
    """The registry entry of one queue. :meth:`beat` is one refresh (for tests);
    :meth:`start` runs it every interval on a thread; :meth:`stop` ends the thread, which
    removes the entry as it leaves."""

    def __init__(
        self,
        backend: Backend,
        *,
        processors: Callable[[], list[Processor]],
        active: Callable[[], int],
        default_interval: float,
    ) -> None:
        self.backend = backend
        self.processors = processors
        self.active = active
        self.default_interval = default_interval
        self.id = new_worker_id()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at: datetime | None = None
        self._pruned_at: datetime | None = None

    @property
    def enabled(self) -> bool:
        return self.backend.supports_workers

    def workers(self) -> list[WorkerInfo]:
        """Every worker process the store records (``gone`` ones marked); an empty list
        when the store keeps no registry."""
        if not self.enabled:
            return []
        return with_states(self.backend.load_workers(), self.backend.now())

    def interval(self) -> float:
        """The shortest heartbeat interval of the queue's processors."""
        beats = [p.heartbeat_interval or self.default_interval for p in self.processors()]
        return min(beats, default=self.default_interval)

    def info(self, now: datetime) -> WorkerInfo:
        if self._started_at is None:
            self._started_at = now
        return WorkerInfo(
            id=self.id,
            host=self.host,
            pid=self.pid,
            concurrency={p.type: p.concurrency for p in self.processors()},
            started_at=self._started_at,
            last_seen=now,
            active=self.active(),
            heartbeat_interval=self.interval(),
        )

    def beat(self) -> bool:
        """Refresh the entry (and, every :data:`PRUNE_EVERY` seconds, remove long-gone
        ones). False when the store failed; logged, and tried again next interval."""
        try:
            now = self.backend.now()
            self.backend.upsert_worker(self.info(now))
            if self._pruned_at is None or (now - self._pruned_at).total_seconds() >= PRUNE_EVERY:
                self._pruned_at = now
                self.backend.prune_workers(removal_cutoff(now))
        except Exception:
            logger.warning("could not refresh this worker's registry entry", exc_info=True)
            return False
        return True

    def start(self) -> None:
        """Write the entry now and keep it fresh; a later call (a new processor) writes the
        new types at once. Nothing when the store keeps no registry."""
        if not self.enabled:
            return
        with self._lock:
            if self._stop.is_set():
                return
            self.beat()
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="durabl-presence", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval()):
            self.beat()
        try:
            self.backend.delete_worker(self.id)
        except Exception:
            logger.warning("could not remove this worker's registry entry", exc_info=True)

    def stop(self, timeout: float) -> None:
        """End the thread (it removes the entry as it leaves); waits up to ``timeout``."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
