"""Fast pickup of jobs written by other processes: a cheap change check on the file.

``PRAGMA data_version`` is a counter, private to one connection, that moves whenever
*another* connection commits to the file. Reading it costs a few microseconds and takes no
lock. One thread per queue reads it on its own connection and, when it moved, asks every
processor of the queue to poll (a processor without a free worker polls once one is free).
A poll that then finds nothing due only reads.

The thread reads every ``interval`` seconds while the file is busy, and ten times less
often once it has seen no commit for a second: each wake-up of a sleeping thread costs the
machine something, and an idle process should cost next to nothing.

This only shortens the wait for work that another process committed: an ``enqueue`` in the
same process wakes its poller directly, and a job that becomes due later (``run_at``,
retries) is found by the processors' own polling, as without the watcher. Any commit counts
(completions too), so a busy file wakes idle processors more often, at most once per
interval each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from durabl.stores.base import PushListener, PushStatus
from durabl.stores.push import WatcherThread

logger = logging.getLogger(__name__)

THREAD_NAME = "durabl-sqlite-watch"
ERROR_BACKOFF_MAX = 5.0
IDLE_FACTOR = 10  # the interval is this many times longer...
IDLE_AFTER = 1.0  # ...once no commit was seen for this many seconds


class ChangeWatcher:
    """Reads ``probe()`` every ``interval`` seconds; when the value moved, wakes every
    processor of ``listener``. :meth:`check_once` is one step, for tests."""

    def __init__(
        self,
        probe: Callable[[], int],
        listener: PushListener,
        *,
        interval: float,
        path: str,
        on_exit: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._clock = clock
        self._changed_at = clock()
        self._listener = listener
        self.interval = interval
        self.path = path
        self._on_exit = on_exit
        self._thread = WatcherThread(THREAD_NAME, self._run)
        self._last: int | None = None
        self._errors = 0
        self._loop_ended = False
        #: How many times a change woke the processors (for status and tests).
        self.wakeups = 0

    # -- one step -------------------------------------------------------------------------
    def check_once(self) -> bool:
        """Read the counter; wake the processors when it moved since the last read (or
        this is the first read). True when they were woken. Raises what the probe
        raises."""
        version = self._probe()
        last, self._last = self._last, version
        # The first read wakes the processors too: a commit between their first poll and
        # this baseline would otherwise wait for the next poll.
        if version == last:
            return False
        self._changed_at = self._clock()
        self.wakeups += 1
        for type in self._listener.push_types():
            self._listener.push_due(type, 0)
        return True

    # -- the thread -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        return self._thread.stop(timeout)

    def _run(self) -> None:
        wait = self.interval
        try:
            while not self._thread.stopping.wait(wait):
                if self._listener.push_closing():
                    break
                try:
                    self.check_once()
                except Exception as exc:
                    self._errors += 1
                    wait = min(self.interval * 2.0 ** min(self._errors, 10), ERROR_BACKOFF_MAX)
                    if self._errors == 1:
                        logger.warning(
                            "checking SQLite file %s for changes failed (%s); jobs from other "
                            "processes are found by polling until it works again",
                            self.path,
                            exc,
                        )
                    continue
                if self._errors:
                    logger.info("checking SQLite file %s for changes works again", self.path)
                    self._errors = 0
                wait = self.next_wait()
        finally:
            self._loop_ended = True
            if self._on_exit is not None:
                self._on_exit()

    def next_wait(self) -> float:
        """The interval, or ``IDLE_FACTOR`` times it once the file has been quiet for
        ``IDLE_AFTER`` seconds."""
        if self._clock() - self._changed_at < IDLE_AFTER:
            return self.interval
        return self.interval * IDLE_FACTOR

    def status(self) -> PushStatus:
        details = {"interval": self.interval, "wakeups": self.wakeups, "errors": self._errors}
        life = self._thread.life()
        if life != "running" or self._loop_ended:
            state = "idle" if life == "idle" else "stopped"
            return PushStatus("poll", f"the SQLite change check is {state}", details)
        if self._errors:
            reason = "the SQLite change check is failing: polling until it works again"
            return PushStatus("poll", reason, details)
        reason = (
            f"SQLite file checked for commits every {self.interval * 1000:g} ms "
            f"({self.interval * IDLE_FACTOR * 1000:g} ms while idle)"
        )
        return PushStatus("push", reason, details)
