"""Bounded, jittered retries of operations that are safe to repeat, and error translation."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TypeVar

from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteConcernError,
)
from tenacity import stop_after_attempt, stop_after_delay

from durabl.model.exceptions import BackendUnavailableError, DurablError
from durabl.stores.retrying import call_repeating

logger = logging.getLogger(__name__)

R = TypeVar("R")

RETRY_ATTEMPTS = 4
RETRY_MAX_SECONDS = 10.0


def is_transient(exc: BaseException) -> bool:
    """AutoReconnect covers NotPrimaryError and network timeouts. Server selection already
    waited its own timeout, so repeating it would only multiply the wait. A write applied but
    not confirmed by its write concern is not repeated: the primary has it already, and a
    repeat would not confirm it either (see :func:`write_unconfirmed`)."""
    return isinstance(exc, AutoReconnect) and not isinstance(exc, ServerSelectionTimeoutError)


def write_unconfirmed(exc: BaseException) -> bool:
    """Whether ``exc`` says the write was applied on the primary but its write concern was
    not met (a ``wtimeout``, a primary stepping down before replicating). Whether it lasts
    is unknown, as after a lost reply, so it is a :class:`BackendUnavailableError`: a claim
    reads its token back and runs the job it took; an enqueue tells its caller, who cannot
    count on the job (a dedupe key makes the caller's retry safe)."""
    if isinstance(exc, WriteConcernError):
        return True
    if isinstance(exc, BulkWriteError):
        details = exc.details or {}
        return bool(details.get("writeConcernErrors")) and not details.get("writeErrors")
    return False


def call_with_retries(
    operation: str,
    fn: Callable[[], R],
    *,
    attempts: int = RETRY_ATTEMPTS,
    max_seconds: float = RETRY_MAX_SECONDS,
) -> R:
    """Run ``fn``; repeat it on transient errors, up to a bound, with jittered backoff.

    Only for operations that are safe to repeat (reads, fenced or receipted writes,
    inserts with a client-made id). The last transient error becomes a
    :class:`BackendUnavailableError`.
    """
    return call_repeating(
        fn,
        repeat_on=is_transient,
        stop=stop_after_attempt(attempts) | stop_after_delay(max_seconds),
        translate=lambda exc: translate(operation, exc),
        driver_errors=PyMongoError,
        before_sleep=lambda state: logger.warning(
            "transient MongoDB error during %s, retrying (attempt %d): %s",
            operation,
            state.attempt_number,
            state.outcome.exception() if state.outcome else None,
        ),
    )


def is_dns_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the host of a ``mongodb+srv://`` URL did not resolve: pymongo
    reports that as a ``ConfigurationError`` raised from dnspython's error (at the first
    operation; before pymongo 4.11, when the client is made)."""
    cause = exc.__cause__
    return (
        isinstance(exc, ConfigurationError)
        and cause is not None
        and type(cause).__module__.partition(".")[0] == "dns"
    )


def translate(operation: str, exc: BaseException) -> DurablError:
    """A durabl error for a pymongo one: callers handle ours, not the driver's."""
    if isinstance(exc, ConnectionFailure) or (isinstance(exc, PyMongoError) and exc.timeout):
        # A deadline (pymongo.timeout) that ran out is the server not answering in time.
        return BackendUnavailableError(f"MongoDB unavailable during {operation}: {reason(exc)}")
    if write_unconfirmed(exc):
        return BackendUnavailableError(
            f"MongoDB unavailable during {operation}: the write was applied but its write "
            f"concern was not met: {reason(exc)}"
        )
    if is_dns_failure(exc):
        return BackendUnavailableError(
            f"MongoDB unavailable during {operation}: the DNS lookup of the mongodb+srv:// "
            f"host failed: {exc}"
        )
    return DurablError(f"MongoDB error during {operation}: {reason(exc)}")


#: The state-change errors (a primary stepping down, a server shutting down) by code: their
#: names, and what each says of the server, for :func:`reason`.
STATE_CHANGES: dict[int, tuple[str, str]] = {
    91: ("ShutdownInProgress", "the server is shutting down"),
    11600: ("InterruptedAtShutdown", "the server is shutting down"),
    189: ("PrimarySteppedDown", "the primary stepped down"),
    11602: ("InterruptedDueToReplStateChange", "the primary stepped down"),
    10107: ("NotWritablePrimary", "the server is no longer primary"),
    13435: ("NotPrimaryNoSecondaryOk", "the server is no longer primary"),
    13436: ("NotPrimaryOrSecondary", "the server is recovering"),
}
_CODE = re.compile(r"""['"]code['"]: (\d+)""")
_SELECTION_TIMEOUT = re.compile(r", Timeout: ([\d.]+)s, Topology Description: ")


def state_change(exc: BaseException) -> int | None:
    """The code of the state-change error ``exc`` is or carries (see :data:`STATE_CHANGES`),
    or, for a server selection that timed out, the one that took the server out of
    selection: pymongo names it only in the message. None for any other error."""
    code = getattr(exc, "code", None)
    if code is None and isinstance(exc, AutoReconnect) and isinstance(exc.details, dict):
        code = exc.details.get("code")  # NotPrimaryError: the server's reply
    if isinstance(code, int) and code in STATE_CHANGES:
        return code
    if isinstance(exc, AutoReconnect):
        for found in _CODE.finditer(str(exc)):
            if int(found.group(1)) in STATE_CHANGES:
                return int(found.group(1))
    return None


def reason(exc: BaseException) -> str:
    """One line for a pymongo error: without the topology server selection appends and the
    raw reply an OperationFailure appends (both repeat the message), with the error code.
    A state-change error, or a server selection it made time out, says so in its own words:
    ``no primary: the server is shutting down (ShutdownInProgress, code 91); waited 8.0 s
    for one``."""
    code = state_change(exc)
    if code is not None:
        name, what = STATE_CHANGES[code]
        waited = _SELECTION_TIMEOUT.search(str(exc))
        tail = f"; waited {waited.group(1)} s for one" if waited else ""
        return f"no primary: {what} ({name}, code {code}){tail}"
    text = str(exc).split(", Topology Description: ", 1)[0]
    text = text.split(", full error: ", 1)[0]
    code = getattr(exc, "code", None)
    return f"{text} (code {code})" if isinstance(exc, OperationFailure) and code else text
