"""The exit safety net of a worker command (``durabl worker``, ``manage.py runworkers``).

A worker's drain ends within its timeout plus
:data:`~durabl.runtime.shutdown.DRAIN_GRACE`, the store down or not; closing the store and
the interpreter's exit come after it. Something can still hold the process up past that:
an exit hook of the application, a thread of its own that is not a daemon, a store call
the startup was still waiting on. :class:`ExitDeadline` ends the process then, with exit
code 1 and a line on stderr, so nothing keeps it past the bound its operator was promised
(and a platform's SIGKILL does not come first, with no word of why).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Protocol

from durabl.runtime.shutdown import DRAIN_GRACE

#: Seconds the process may take to end once the drain's bound has passed: closing the store
#: (bounded by each store) and the interpreter's exit (pymongo's threads take up to half a
#: second to notice a closed client). Past it, the process stops at once (exit 1).
EXIT_GRACE = 1.5
#: The exit code of a worker stopped without a clean exit: a second signal, or the deadline.
ABORT_EXIT_CODE = 1


class Output(Protocol):
    """A text stream: ``sys.stderr`` or a Django management command's ``OutputWrapper``."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...


class ExitDeadline:
    """Ends the process :attr:`limit` seconds after its first signal if it is still alive:
    the drain's ``shutdown_timeout``, plus :data:`~durabl.runtime.shutdown.DRAIN_GRACE`,
    plus :data:`EXIT_GRACE`.

    :meth:`start` it from the main thread before taking over the signals (it starts a
    daemon thread, ``durabl-exit-deadline``, that waits); :meth:`arm` it in the signal
    handler (it only sets an event, which a signal handler may do). ``armed``: an event of
    the caller's to wait on instead (set by the caller's handler). Once the limit has
    passed it writes one line to ``stderr`` (``"<name>: not exited ..."``), flushes
    ``stdout``, and calls ``hard_exit(1)`` (``os._exit``, which no exit hook or thread can
    hold up). ``stderr`` and ``stdout`` default to ``sys.stderr`` and ``sys.stdout`` as
    they are then."""

    def __init__(
        self,
        shutdown_timeout: float,
        *,
        name: str = "durabl",
        stderr: Output | None = None,
        stdout: Output | None = None,
        hard_exit: Callable[[int], object] = os._exit,
        armed: threading.Event | None = None,
    ) -> None:
        #: Seconds from the signal to the end of the process, at the latest.
        self.limit = shutdown_timeout + DRAIN_GRACE + EXIT_GRACE
        self.name = name
        self.stderr = stderr
        self.stdout = stdout
        self.hard_exit = hard_exit
        self._armed = armed if armed is not None else threading.Event()
        self._cancelled = False
        self._thread: threading.Thread | None = None

    @property
    def armed(self) -> bool:
        """Whether the countdown has started."""
        return self._armed.is_set() and not self._cancelled

    def start(self) -> None:
        """Start the thread that waits for :meth:`arm` (once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="durabl-exit-deadline", daemon=True
            )
            self._thread.start()

    def arm(self) -> None:
        """Start the countdown (the first call counts). Safe in a signal handler."""
        self._armed.set()

    def cancel(self) -> None:
        """End the thread if the countdown has not started (a process that goes on after
        its worker returned without a signal: a test); nothing once it has."""
        if self._armed.is_set():
            return
        self._cancelled = True
        self._armed.set()

    def _run(self) -> None:
        self._armed.wait()
        if self._cancelled:
            return
        threading.Event().wait(self.limit)
        try:
            err = self.stderr or sys.stderr
            err.write(
                f"{self.name}: not exited {self.limit:g} s after the signal (the store or an "
                "exit hook does not answer): stopping now; jobs not handed back return to "
                "pending when their lease expires\n"
            )
            err.flush()
            (self.stdout or sys.stdout).flush()
        finally:
            self.hard_exit(ABORT_EXIT_CODE)
