"""A queue's entry in the live workers registry (docs/operations.md, "Live workers").

A queue that runs processors records itself in the store and refreshes the entry every
heartbeat interval on one named thread, ``durabl-presence``: one write per interval per
queue, however many types and worker threads it has, and no store operation per job. The
interval is the shortest heartbeat interval of its processors. The thread also looks at
the queue's count of active runs a few times per interval
(``durabl.model.workers.active_check_every``) and writes the entry early when the count
changed, so ``active`` follows the runs without a write per job. Every
:data:`PRUNE_EVERY` seconds the same thread also removes the entries of processes gone for
an hour (``durabl.model.workers.REMOVE_AFTER``).

The thread's last act is removing the queue's own entry: the drain stops it once the
queue's runs are over or handed back, and waits for the removal before ``shutdown()``
returns; a process that exits without a shutdown removes it at exit (within
:data:`EXIT_REMOVAL_TIMEOUT`). Refreshes and the removal are one thread's writes, in
order, so no refresh can bring the entry back.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import uuid
import weakref
from collections.abc import Callable
from datetime import datetime

from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.workers import WorkerInfo, active_check_every, removal_cutoff, with_states
from durabl.runtime.outages import OutageLog, log_failure
from durabl.runtime.worker import Processor
from durabl.stores.base import Backend

logger = logging.getLogger(__name__)

#: How often (seconds) a live queue removes the entries of long-gone processes.
PRUNE_EVERY = 600.0
#: Seconds a process that exits without a shutdown waits for its entries' removal (all
#: of its queues' together).
EXIT_REMOVAL_TIMEOUT = 1.0

# The presences whose thread runs: a process that exits without a shutdown removes their
# entries (one exit hook, registered with the first).
_running: weakref.WeakSet[Presence] = weakref.WeakSet()
_running_lock = threading.Lock()
_exit_hook_registered = False


def _track(presence: Presence) -> None:
    global _exit_hook_registered
    with _running_lock:
        _running.add(presence)
        if not _exit_hook_registered:
            atexit.register(_remove_all_at_exit)
            _exit_hook_registered = True


def _untrack(presence: Presence) -> None:
    with _running_lock:
        _running.discard(presence)


def _remove_all_at_exit() -> None:
    """Stop every running presence (each thread removes its entry), then wait for them
    within one :data:`EXIT_REMOVAL_TIMEOUT` in all. The store may be closed by now: a
    failed removal is not worth a warning here."""
    with _running_lock:
        presences = list(_running)
    for presence in presences:
        presence.quiet_failures = True
        presence.stop(None)
    deadline = SYSTEM_CLOCK.monotonic() + EXIT_REMOVAL_TIMEOUT
    for presence in presences:
        presence.stop(max(0.0, deadline - SYSTEM_CLOCK.monotonic()))


def new_worker_id() -> str:
    """``host:pid:random``: two queues of one process are two entries."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Presence:
    """The registry entry of one queue. :meth:`beat` is one refresh (for tests);
    :meth:`start` runs it every interval, and when the active count changed, on a thread;
    :meth:`stop` ends the thread, which removes the entry as it leaves. ``clock`` paces
    the thread (real time: the store's clock only stamps the entry)."""

    def __init__(
        self,
        backend: Backend,
        *,
        processors: Callable[[], list[Processor]],
        active: Callable[[], int],
        default_interval: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.backend = backend
        self.clock = clock
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
        # Serialises the entry's writes: no refresh after the removal.
        self._write_lock = threading.Lock()
        self._removed = False
        # The last refresh tried (monotonic, on ``clock``) and the active count it wrote.
        self._written_at: float | None = None
        self._written_active: int | None = None
        #: Log a failed removal at debug level only: at process exit, or once a shutdown
        #: stopped waiting for it (the store may be closed under it by then).
        self.quiet_failures = False
        #: Failed refreshes: one line as they start failing, one when a refresh works again.
        self.failures = OutageLog(
            logger, "refreshing this worker's registry entry", ("refresh", "refreshes"), clock=clock
        )

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
        ones). False when the store failed (logged, and tried again next interval), or
        once the entry was removed: a stopped queue never writes it again."""
        with self._write_lock:
            if self._removed:
                return False
            self._written_at = self.clock.monotonic()
            try:
                now = self.backend.now()
                info = self.info(now)
                self._written_active = info.active
                self.backend.upsert_worker(info)
                since_prune = None if self._pruned_at is None else now - self._pruned_at
                if since_prune is None or since_prune.total_seconds() >= PRUNE_EVERY:
                    self._pruned_at = now
                    self.backend.prune_workers(removal_cutoff(now))
            except Exception as exc:
                self.failures.failed(exc)
                return False
            self.failures.succeeded()
            return True

    def remove(self) -> None:
        """Remove the entry, once; later refreshes write nothing. A store failure is
        logged: the entry then shows ``gone`` after three intervals."""
        with self._write_lock:
            if self._removed:
                return
            self._removed = True
            try:
                self.backend.delete_worker(self.id)
            except Exception as exc:
                message = "could not remove this worker's registry entry (shown gone later)"
                log_failure(logger, exc, message, quiet=self.quiet_failures)

    def refresh_if_due(self) -> bool:
        """One look of the thread: refresh when an interval passed since the last refresh
        or the count of active runs changed since. True when it wrote."""
        interval = self.interval()
        written_at = self._written_at
        due = (
            written_at is None
            or self.clock.monotonic() - written_at >= interval
            or self.active() != self._written_active
        )
        return self.beat() if due else False

    def until_next_look(self) -> float:
        """Seconds until the thread looks again: the next active-count check, or the
        next regular refresh when that comes first."""
        interval = self.interval()
        look = active_check_every(interval)
        if self._written_at is None:
            return look
        until_refresh = self._written_at + interval - self.clock.monotonic()
        return max(0.0, min(look, until_refresh))

    def start(self) -> None:
        """Write the entry now and keep it fresh; a later call (a new processor) writes the
        new types at once. Nothing when the store keeps no registry."""
        if not self.enabled:
            return
        if self._stop.is_set():
            return
        # Not under the lock: a store that does not answer holds this write up, and a
        # shutdown meanwhile must not wait for it to stop the thread.
        self.beat()
        with self._lock:
            stopped = self._stop.is_set()
            if not stopped and self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="durabl-presence", daemon=True
                )
                self._thread.start()
                _track(self)  # a process that ends without a shutdown takes its entry along
        if stopped and self._thread is None:
            self.remove()  # stopped during the first write: no thread will remove it

    def _run(self) -> None:
        while not self._stop.wait(self.until_next_look()):
            try:
                self.refresh_if_due()
            except Exception:  # processors() or active() broke: keep the entry alive
                logger.warning("could not check this worker's registry entry", exc_info=True)
        self.remove()

    def stop(self, timeout: float | None) -> None:
        """End the thread, which removes the entry as it leaves; waits up to ``timeout``
        for it. With None the removal only starts: the drain does that first, and waits
        at its end. A thread still busy after the wait is abandoned (a store that does not
        answer): what it meets later, a closed store most likely, is logged at DEBUG."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        _untrack(self)
        if timeout is None or thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            self.quiet_failures = True
            self.failures.quiet = True
