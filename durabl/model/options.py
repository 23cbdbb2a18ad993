"""Enqueue options: validation and every default in one place. Pure: no I/O."""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from durabl.model import backoff as _backoff
from durabl.model.clock import Seconds, to_seconds
from durabl.model.exceptions import DocumentTooLargeError
from durabl.model.flow import check_concurrency
from durabl.model.job import (  # noqa: F401 - found here too, with the limits
    DEDUPE_SCOPES,
    MAX_FAIL_REASON_BYTES,
    DedupeScope,
    clip_reason,
    clip_text,
)
from durabl.model.payload import check_payload

# The backoff defaults are options like the others (defined with the policy, which
# durabl.model.job uses and so cannot live here).
BACKOFF_JITTER = _backoff.BACKOFF_JITTER
BACKOFF_KINDS = _backoff.BACKOFF_KINDS
DEFAULT_BACKOFF = _backoff.DEFAULT_BACKOFF
DEFAULT_BACKOFF_DELAY = _backoff.DEFAULT_BACKOFF_DELAY
DEFAULT_BACKOFF_MAX_DELAY = _backoff.DEFAULT_BACKOFF_MAX_DELAY
LATEST_INSTANT = _backoff.LATEST_INSTANT
MAX_BACKOFF_DELAY = _backoff.MAX_BACKOFF_DELAY
BackoffKind = _backoff.BackoffKind
BackoffPolicy = _backoff.BackoffPolicy
DEFAULT_PRIORITY = 0
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_DEDUPE_SCOPE: DedupeScope = "pending+active"
DEFAULT_VISIBILITY_TIMEOUT = 300.0
DEFAULT_POLL_INTERVAL = 5.0
PUSH_SAFETY_POLL_INTERVAL = 60.0
DEFAULT_MAX_DRAINS = 10
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
RELEASE_WRITE_TIMEOUT = 1.0
MAX_LOG_ENTRIES = 1000
MAX_LOG_MESSAGE_BYTES = 2048
RECEIPTS_KEPT = 16
# MongoDB's document limit, less room kept free in every job so that a full log, the
# longest failure reason and the receipts still fit when the job is marked failed. Every
# store applies the same budget, so a payload accepted by one is accepted by all.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
_LOG_ENTRY_OVERHEAD = 64
LOG_BUDGET = MAX_LOG_ENTRIES * (MAX_LOG_MESSAGE_BYTES + _LOG_ENTRY_OVERHEAD)
HEADROOM = LOG_BUDGET + MAX_FAIL_REASON_BYTES + RECEIPTS_KEPT * 128 + 64 * 1024
MAX_JOB_DOCUMENT = MAX_DOCUMENT_BYTES - HEADROOM
MAX_PAYLOAD_BYTES = MAX_JOB_DOCUMENT - 8 * 1024  # the job's own fields take the rest
COALESCE_MODES = ("latest",)
MAX_PRIORITY = 2**31 - 1
MAX_TYPE_BYTES = 255
MAX_DEDUPE_KEY_BYTES = 1024
#: The most a job's trace context (its propagation headers) may take, keys and values.
MAX_TRACE_CONTEXT_BYTES = 8 * 1024


@dataclass(frozen=True)
class NewJob:
    """A validated enqueue request, ready for a backend to store."""

    type: str
    data: Any
    priority: int
    run_at: datetime | None  # None: due now, at the store's clock
    max_attempts: int
    dedupe_key: str | None
    dedupe_scope: DedupeScope
    coalesce: str | None
    backoff: BackoffPolicy
    #: Flow control (durabl.model.flow): at most ``concurrency_limit`` active jobs hold
    #: ``concurrency_key`` at once; both None for a job without a key.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    #: Debounce (seconds; None: none): a later enqueue of the key while this job is
    #: pending pushes its run_at to that enqueue's now + ``debounce``, never past the
    #: job's first enqueue + ``debounce_max`` (see :func:`durabl.model.rules.debounced_run_at`).
    debounce: float | None = None
    debounce_max: float | None = None
    #: Propagation headers stored with the job (W3C ``traceparent``/``tracestate``),
    #: set by an enqueue hook such as :func:`durabl.tracing.instrument`'s; None: none.
    trace_context: dict[str, str] | None = None
    #: The job's time limit in seconds (None: its type's, if any).
    timeout: float | None = None
    #: A child's parent orchestration and its place there (``octx.start_children``).
    parent_id: str | None = None
    parent_step: str | None = None

    def __post_init__(self) -> None:
        if self.trace_context is not None:
            object.__setattr__(self, "trace_context", check_trace_context(self.trace_context))

    @property
    def scope_for_store(self) -> DedupeScope | None:
        return self.dedupe_scope if self.dedupe_key is not None else None

    def with_trace_context(self, headers: dict[str, str] | None) -> NewJob:
        """This request with ``trace_context`` set (checked), every other field the very
        same object: what ``dataclasses.replace`` gives, without re-running ``__init__``
        for every field (an enqueue hook does this on every enqueue)."""
        copy = object.__new__(NewJob)
        copy.__dict__.update(self.__dict__)
        checked = None if headers is None else check_trace_context(headers)
        object.__setattr__(copy, "trace_context", checked)
        return copy


def check_keywords(what: str, given: Iterable[str], allowed: Collection[str]) -> None:
    """``TypeError`` naming ``what`` (``"enqueue()"``...) for a keyword in ``given`` that
    is not ``allowed``, as Python says it of a function's own parameters."""
    unknown = sorted(name for name in given if name not in allowed)
    if unknown:
        raise TypeError(f"{what} got an unexpected keyword argument {unknown[0]!r}")


def check_trace_context(value: Any) -> dict[str, str] | None:
    """``value`` as a job's trace context: a mapping of non-empty ``str`` keys to ``str``
    values, at most MAX_TRACE_CONTEXT_BYTES in all (an empty one is None). ``TypeError``
    for other types, ``ValueError`` when too large."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"trace_context must be a mapping of str to str, got {value!r}")
    checked: dict[str, str] = {}
    size = 0
    for key, item in value.items():
        if not isinstance(key, str) or not key or not isinstance(item, str):
            raise TypeError(
                f"trace_context must map non-empty str keys to str values, got {key!r}: {item!r}"
            )
        checked[key] = item
        size += len(key.encode("utf-8", "replace")) + len(item.encode("utf-8", "replace"))
    if size > MAX_TRACE_CONTEXT_BYTES:
        raise ValueError(
            f"trace_context takes {size} bytes; a job keeps at most {MAX_TRACE_CONTEXT_BYTES}"
        )
    return checked or None


def check_timeout(value: Seconds | None) -> float | None:
    """A time limit in seconds (``timeout=`` of an enqueue, ``@durabl.job`` or
    ``process()``): positive and finite, a number or a ``timedelta``; None: no limit."""
    if value is None:
        return None
    seconds = to_seconds(value, "timeout")
    if not seconds > 0:
        raise ValueError(f"timeout must be positive, got {value!r}")
    return seconds


def check_queue_durations(
    visibility_timeout: Seconds, retention: Seconds | None
) -> tuple[float, float | None]:
    """A queue's visibility timeout and retention in seconds; ``ValueError`` unless both
    are positive (a retention of None keeps finished jobs)."""
    vt = to_seconds(visibility_timeout, "visibility_timeout")
    if vt <= 0:
        raise ValueError("visibility_timeout must be positive")
    keep = None if retention is None else to_seconds(retention, "retention")
    if keep is not None and not keep > 0:
        raise ValueError(f"retention must be a positive duration or None, got {retention!r}")
    return vt, keep


def check_payload_size(type: str, size: int) -> None:
    if size > MAX_PAYLOAD_BYTES:
        raise DocumentTooLargeError(
            f"job of type {type!r} carries {size} bytes of data; a job may carry at most "
            f"{MAX_PAYLOAD_BYTES} bytes, its type and dedupe key included (MongoDB's 16 MB "
            "document limit less room for logs and the failure reason). Store large data "
            "elsewhere and enqueue a reference."
        )


def check_job_type(type: str) -> str:
    if not isinstance(type, str) or not type:
        raise ValueError(f"job type must be a non-empty string, got {type!r}")
    if type.isspace():
        raise ValueError(f"job type must not be only whitespace, got {type!r}")
    if any(unicodedata.category(char) == "Cc" for char in type):
        # Types name threads, log lines and admin pages; NUL is also refused by some stores.
        raise ValueError(
            f"job type must not contain control characters (NUL, tab, newline, ...), "
            f"got {type[:40]!r}"
        )
    if len(type.encode("utf-8", "replace")) > MAX_TYPE_BYTES:
        raise ValueError(f"job type must be at most {MAX_TYPE_BYTES} bytes, got {type[:40]!r}...")
    return type


def check_dedupe_key(dedupe_key: str) -> str:
    if not isinstance(dedupe_key, str) or not dedupe_key:
        raise ValueError(f"dedupe_key must be a non-empty string, got {dedupe_key!r}")
    if dedupe_key.isspace():
        raise ValueError(f"dedupe_key must not be only whitespace, got {dedupe_key!r}")
    if "\x00" in dedupe_key:
        # Not every store can hold NUL in a text column (PostgreSQL refuses it).
        raise ValueError(f"dedupe_key must not contain NUL characters, got {dedupe_key[:40]!r}")
    if len(dedupe_key.encode("utf-8", "replace")) > MAX_DEDUPE_KEY_BYTES:
        raise ValueError(f"dedupe_key must be at most {MAX_DEDUPE_KEY_BYTES} bytes")
    return dedupe_key


def _backoff_seconds(value: Seconds, name: str) -> float:
    seconds = to_seconds(value, name)
    if seconds > MAX_BACKOFF_DELAY:
        raise ValueError(
            f"{name} must be at most {MAX_BACKOFF_DELAY:g} seconds (one year), got {value!r}"
        )
    return seconds


def build_new_job(
    type: str,
    data: Any,
    *,
    priority: int = DEFAULT_PRIORITY,
    delay: Seconds = 0,
    run_at: datetime | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    dedupe_key: str | None = None,
    dedupe_scope: str = DEFAULT_DEDUPE_SCOPE,
    coalesce: str | None = None,
    backoff: str = DEFAULT_BACKOFF,
    backoff_delay: Seconds = DEFAULT_BACKOFF_DELAY,
    backoff_max_delay: Seconds = DEFAULT_BACKOFF_MAX_DELAY,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    debounce: Seconds | None = None,
    debounce_max: Seconds | None = None,
    timeout: Seconds | None = None,
    now: datetime | None = None,
) -> NewJob:
    """Validate every enqueue option; raise before anything is written.

    ``TypeError`` for a payload the stores cannot hold, ``ValueError`` for a bad option.
    ``now`` is needed only to turn ``delay`` or ``debounce`` into an instant.
    """
    check_job_type(type)
    size = check_payload(data)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an int, got {priority!r}")
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must fit in 32 bits, got {priority!r}")
    delay_s = to_seconds(delay, "delay")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise ValueError(f"run_at must be a datetime, got {run_at!r}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ValueError(
                "run_at must be timezone-aware (for example datetime.now(timezone.utc))"
            )
        if delay_s:
            raise ValueError("pass either delay or run_at, not both")
        try:
            run_at = run_at.astimezone(timezone.utc)
        except OverflowError:
            raise ValueError(f"run_at {run_at!r} is outside the range of UTC datetimes") from None
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
    if dedupe_key is not None:
        check_dedupe_key(dedupe_key)
        size += 2 * len(dedupe_key.encode("utf-8", "replace"))  # the key and its slot
    key, key_limit = check_concurrency(concurrency_key, concurrency_limit)
    if key is not None:
        size += len(key.encode("utf-8", "replace"))
    check_payload_size(type, size + len(type.encode("utf-8", "replace")))
    if dedupe_scope not in DEDUPE_SCOPES:
        raise ValueError(f"dedupe_scope must be one of {DEDUPE_SCOPES}, got {dedupe_scope!r}")
    if coalesce is not None:
        if coalesce not in COALESCE_MODES:
            raise ValueError(f"coalesce must be None or 'latest', got {coalesce!r}")
        if dedupe_key is None:
            raise ValueError("coalesce='latest' needs a dedupe_key to know what to coalesce with")
    wait, wait_max = _debounce_seconds(debounce, debounce_max, dedupe_key, delay_s, run_at)
    if backoff not in BACKOFF_KINDS:
        raise ValueError(f"backoff must be one of {BACKOFF_KINDS}, got {backoff!r}")
    policy = BackoffPolicy(
        backoff,
        _backoff_seconds(backoff_delay, "backoff_delay"),
        _backoff_seconds(backoff_max_delay, "backoff_max_delay"),
    )
    if policy.kind == "exponential" and policy.max_delay < policy.delay:
        # (A fixed backoff waits backoff_delay and ignores the cap.)
        raise ValueError(
            f"backoff_max_delay ({backoff_max_delay!r}) must not be less than backoff_delay "
            f"({backoff_delay!r})"
        )
    if wait is not None:  # the first enqueue of a burst is due debounce seconds from now
        delay_s = wait
    if delay_s:
        if now is None:
            raise ValueError("delay needs a clock")  # programming error inside durabl
        try:
            run_at = now + timedelta(seconds=delay_s)
        except OverflowError:
            raise ValueError(
                f"delay={delay!r} is too far in the future: the job would be due "
                f"after {LATEST_INSTANT:%Y-%m-%d}, the last day a datetime can hold"
            ) from None
    return NewJob(
        type=type,
        data=data,
        priority=priority,
        run_at=run_at,
        max_attempts=max_attempts,
        dedupe_key=dedupe_key,
        dedupe_scope=dedupe_scope,
        coalesce=coalesce,
        backoff=policy,
        concurrency_key=key,
        concurrency_limit=key_limit,
        debounce=wait,
        debounce_max=wait_max,
        timeout=check_timeout(timeout),
    )


def _debounce_seconds(
    debounce: Seconds | None,
    debounce_max: Seconds | None,
    dedupe_key: str | None,
    delay: float,
    run_at: datetime | None,
) -> tuple[float | None, float | None]:
    """``debounce`` and ``debounce_max`` in seconds (None: not given), or ``ValueError``:
    each positive and at most a year, the bound no shorter than the wait, both only with
    a dedupe key (the key names the burst) and never with ``delay`` or ``run_at`` (the
    debounce decides when the job is due)."""
    if debounce is None:
        if debounce_max is not None:
            raise ValueError("debounce_max bounds a debounce: pass debounce too")
        return None, None
    wait = _debounce_duration(debounce, "debounce")
    if dedupe_key is None:
        raise ValueError("debounce needs a dedupe_key: the key names the burst it debounces")
    if delay or run_at is not None:
        raise ValueError(
            "debounce decides when the job is due: pass debounce, or delay/run_at, not both"
        )
    if debounce_max is None:
        return wait, None
    wait_max = _debounce_duration(debounce_max, "debounce_max")
    if wait_max < wait:
        raise ValueError(
            f"debounce_max ({debounce_max!r}) must not be less than debounce ({debounce!r})"
        )
    return wait, wait_max


def _debounce_duration(value: Seconds, name: str) -> float:
    seconds = to_seconds(value, name)
    if not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if seconds > MAX_BACKOFF_DELAY:
        raise ValueError(
            f"{name} must be at most {MAX_BACKOFF_DELAY:g} seconds (one year), got {value!r}"
        )
    return seconds


def validate_enqueue(type: str, data: Any, **options: Any) -> None:
    """Check a job and its enqueue options as ``JobQueue.enqueue`` would, writing nothing:
    ``TypeError`` for a payload no store can hold, ``ValueError`` for a bad option,
    ``DocumentTooLargeError`` over the size budget. For callers that enqueue later (for
    example after a database transaction commits) and want errors at the call site."""
    from durabl.model.clock import SYSTEM_CLOCK

    build_new_job(type, data, now=SYSTEM_CLOCK.now(), **options)
