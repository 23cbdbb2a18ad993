"""Store failures met in a loop, logged once per episode instead of once per failure.

A poller claims every few seconds, a heartbeat renews every interval, the registry
refreshes, the reaper sweeps: while the store is down, each of them fails again and again.
Logging every failure (with its chained traceback) buries the one thing an operator needs,
when it started and when it ended. So each such place keeps an :class:`OutageLog`:

- the first failure of an episode is one line: the store's error named on one line, at
  WARNING for a :class:`~durabl.model.exceptions.BackendUnavailableError` (the store is
  down, a connection was lost) and at ERROR for another error durabl raised itself (the
  store refused the operation; its message says why); any other error is unexpected (a
  bug, a driver error nobody translated) and keeps its traceback, at ERROR;
- the failures after it are counted, and logged at DEBUG only; a failure of another kind
  within the episode gets its own line, so a second problem is not hidden behind the first;
- the first success after them is one INFO line: how long it lasted, how many failed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import BackendUnavailableError, DurablError

#: The longest error message a line carries (a driver's can run to pages).
MAX_MESSAGE = 500


def one_line(error: BaseException) -> str:
    """``Type: message`` on one line, clipped to :data:`MAX_MESSAGE` characters. Never
    raises, whatever the exception's ``__str__`` does."""
    try:
        text = " ".join(str(error).split())
    except Exception:
        text = "<unprintable>"
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def log_failure(
    logger: logging.Logger,
    error: BaseException,
    message: str,
    *args: object,
    then: str = "",
    extra: Mapping[str, object] | None = None,
    quiet: bool = False,
) -> None:
    """Log ``message % args`` for a failure with ``error``, then ``then``. An error durabl
    raised itself says what failed in its message: it follows ``message`` on the line, with
    no traceback, at WARNING for a :class:`BackendUnavailableError` (the store is down, a
    connection was lost) and at ERROR for another (the store refused the operation). Any
    other error is unexpected and keeps its traceback, at ERROR. ``quiet``: at DEBUG,
    whatever the error."""
    if isinstance(error, DurablError):
        unavailable = isinstance(error, BackendUnavailableError)
        level = logging.DEBUG if quiet else logging.WARNING if unavailable else logging.ERROR
        logger.log(level, f"{message}: %s{then}", *args, one_line(error), extra=extra)
        return
    level = logging.DEBUG if quiet else logging.ERROR
    logger.log(level, f"{message}{then}", *args, exc_info=error, extra=extra)


class OutageLog:
    """The log of one place that calls the store in a loop: ``doing`` says what it does
    (``"claiming report jobs"``), ``tries`` names one attempt and several
    (``("claim", "claims")``). :meth:`failed` after each failure, :meth:`succeeded` after
    each success; thread-safe, so threads doing the same thing can share one. ``extra``
    goes into every record (``{"type": ...}``)."""

    def __init__(
        self,
        logger: logging.Logger,
        doing: str,
        tries: tuple[str, str],
        *,
        clock: Clock = SYSTEM_CLOCK,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        self.logger = logger
        self.doing = doing
        self.tries = tries
        self.clock = clock
        self.extra = dict(extra or {})
        #: Log everything at DEBUG only (a place abandoned at shutdown, whose store may be
        #: closed under it).
        self.quiet = False
        self._lock = threading.Lock()
        self._since: float | None = None  # monotonic time of the episode's first failure
        self._failures = 0
        self._kinds: set[type[BaseException]] = set()

    @property
    def failing(self) -> bool:
        """Whether an episode is under way (the last attempt failed)."""
        return self._since is not None

    @property
    def failures(self) -> int:
        """How many attempts failed in the episode under way (0 when none is)."""
        return self._failures

    def failed(self, error: BaseException) -> bool:
        """Count a failure; log it when it starts an episode or is of a kind the episode
        had not met yet. True when it was logged (above DEBUG)."""
        with self._lock:
            if self._since is None:
                self._since = self.clock.monotonic()
            self._failures += 1
            in_a_row = self._failures
            new_kind = type(error) not in self._kinds
            self._kinds.add(type(error))
        if not new_kind:
            self.logger.debug(
                "%s failed again (%d in a row): %s",
                self.doing,
                in_a_row,
                one_line(error),
                extra=self.extra,
            )
            return False
        log_failure(
            self.logger,
            error,
            "%s failed%s",
            self.doing,
            "" if in_a_row == 1 else " with another error",
            then="; retrying, quietly until it works again",
            extra=self.extra,
            quiet=self.quiet,
        )
        return True

    def succeeded(self) -> None:
        """End the episode under way, if any, with one line."""
        if not self.failing:  # the usual case, without taking the lock
            return
        with self._lock:
            since, failures = self._since, self._failures
            self._since = None
            self._failures = 0
            self._kinds.clear()
        if since is None:  # another thread ended it meanwhile
            return
        took = self.clock.monotonic() - since
        one, several = self.tries
        self.logger.log(
            logging.DEBUG if self.quiet else logging.INFO,
            "%s works again after %.1f s; %d %s failed meanwhile",
            self.doing,
            took,
            failures,
            one if failures == 1 else several,
            extra=self.extra,
        )
