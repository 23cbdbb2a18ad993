"""Bulk enqueue: :class:`Child`, one job of a batch with its enqueue options, and the rules
a batch obeys before anything is written (its chunk size, a dedupe key under one scope).
Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import Any

from durabl.model.clock import SYSTEM_CLOCK, Seconds
from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.options import NewJob, build_new_job, check_keywords

#: The most jobs one bulk write sends to a store: one statement or one ``insert_many``.
BULK_CHUNK = 1000

#: The options one job of ``enqueue_many`` may carry: ``enqueue()``'s, but ``connection``
#: (a batch is written through the queue's own connections).
BULK_OPTIONS = (
    "priority",
    "delay",
    "run_at",
    "max_attempts",
    "dedupe_key",
    "dedupe_scope",
    "coalesce",
    "backoff",
    "backoff_delay",
    "backoff_max_delay",
    "concurrency_key",
    "concurrency_limit",
    "debounce",
    "debounce_max",
    "timeout",
)


@dataclass(frozen=True)
class Child:
    """One job to create: its type, its data and ``enqueue()``'s options (None: the
    type's declared default, else durabl's). The options are checked when it is made
    (``ValueError``/``TypeError`` as ``enqueue()`` raises them); the data when it is
    enqueued, against its type's schema if it has one."""

    type: str
    data: Any
    _: KW_ONLY  # the options by name, as enqueue() takes them
    priority: int | None = None
    delay: Seconds = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    dedupe_key: str | None = None
    dedupe_scope: str | None = None
    coalesce: str | None = None
    backoff: str | None = None
    backoff_delay: Seconds | None = None
    backoff_max_delay: Seconds | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    debounce: Seconds | None = None
    debounce_max: Seconds | None = None
    timeout: Seconds | None = None

    def __post_init__(self) -> None:
        given = {name: value for name, value in self.options().items() if value is not None}
        # The payload waits for the enqueue: a type's schema may take what no store holds.
        build_new_job(self.type, None, now=SYSTEM_CLOCK.now(), **given)

    def options(self) -> dict[str, Any]:
        """Every enqueue option of this job, by name (None: not given)."""
        return {name: getattr(self, name) for name in BULK_OPTIONS}


def batch_item(item: object) -> tuple[str, Any, dict[str, Any]]:
    """The type, data and options (every one of :data:`BULK_OPTIONS`, None where not
    given, ``delay`` 0) of one item of ``enqueue_many``: ``(type, data)``, ``(type, data,
    options)`` or a :class:`Child`. ``TypeError`` for anything else, or an option
    ``enqueue()`` does not take."""
    options: dict[str, Any] = dict.fromkeys(BULK_OPTIONS)
    options["delay"] = 0
    if isinstance(item, Child):
        return item.type, item.data, item.options()
    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise TypeError(
            "each job of enqueue_many() is (type, data), (type, data, options) or "
            f"durabl.Child(type, data, ...), got {item!r:.100}"
        )
    if len(item) == 3:
        given = item[2]
        if not isinstance(given, Mapping):
            raise TypeError(f"a job's options are a dict of enqueue() options, got {given!r:.100}")
        check_keywords("enqueue_many() (a job's options)", given, BULK_OPTIONS)
        options.update(given)
    return item[0], item[1], options


def check_batch_scopes(jobs: Sequence[NewJob]) -> None:
    """``DedupeScopeConflictError`` when two jobs of one batch give their dedupe key
    different scopes: one after the other, the second would meet the first live under the
    other scope. A batch is refused whole, before anything is written."""
    scopes: dict[str, str] = {}
    for position, job in enumerate(jobs):
        key = job.dedupe_key
        if key is None:
            continue
        first = scopes.setdefault(key, job.dedupe_scope)
        if first != job.dedupe_scope:
            raise at_position(DedupeScopeConflictError(key, job.dedupe_scope, first), position)


def at_position(error: BaseException, position: int) -> BaseException:
    """``error`` (its type kept, so a caller catches what ``enqueue()`` raises) with its
    message saying it is about job ``position`` of an ``enqueue_many`` batch."""
    args = error.args
    if args and isinstance(args[0], str):
        error.args = (f"enqueue_many(): job {position}: {args[0]}", *args[1:])
    return error
