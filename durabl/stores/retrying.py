"""Bounded, jittered repeats of a store operation, and the translation of what still fails.

Store-neutral: a store says which errors are worth repeating, when to stop, and how its
driver's errors become durabl's (:class:`~durabl.model.exceptions.BackendUnavailableError`
or :class:`~durabl.model.exceptions.DurablError`). Imported by the stores only, so that
``import durabl`` does not load tenacity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from durabl.model.exceptions import DurablError

R = TypeVar("R")


def call_repeating(
    fn: Callable[[], R],
    *,
    repeat_on: Callable[[BaseException], bool],
    stop: stop_base,
    translate: Callable[[BaseException], DurablError],
    driver_errors: type[BaseException] | tuple[type[BaseException], ...],
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> R:
    """Run ``fn``; repeat it while it raises an error ``repeat_on`` accepts, with jittered
    exponential backoff (50 ms base, at most 1 s between tries), until ``stop``. The last
    such error, or any other of ``driver_errors``, is raised as ``translate`` makes it,
    from the driver's error; anything else propagates as it is."""
    retrying = Retrying(
        retry=retry_if_exception(repeat_on),
        stop=stop,
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        reraise=False,
        before_sleep=before_sleep,
    )
    try:
        return retrying(fn)
    except RetryError as exc:
        cause = exc.last_attempt.exception()
        assert cause is not None
        raise translate(cause) from cause
    except driver_errors as exc:
        raise translate(exc) from exc
