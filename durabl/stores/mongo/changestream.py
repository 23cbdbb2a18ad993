"""Push pickup on MongoDB change streams: the pipeline, the resume rules, the pieces.

One watcher (:class:`durabl.stores.mongo.watcher.Watcher`) per :class:`durabl.JobQueue`, on one
thread (``durabl-changestream``). It never claims anything itself: it tells the queue which
job types may have a claimable job, and the queue wakes those processors that have a free
slot. Polling stays on as a safety net, so a notification that is lost, dropped or never
sent delays a job (until the next safety poll) but never loses it.

The pipeline (:func:`claimable_pipeline`) filters on the server and only on what the oplog
entry itself holds, so that resuming from any token we saw is always possible, and it
projects scheduling fields only (never ``data``, never ``updatedFields``). What passes,
why updates are looked up rather than read with ``updateLookup``, and how the watcher
resumes after each kind of failure: docs/change-streams.md ("What the server sends",
"When the stream fails").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from pymongo.errors import ConnectionFailure, CursorNotFound, OperationFailure, PyMongoError

from durabl.model.exceptions import DurablError
from durabl.stores.mongo.flow import SLOT

THREAD_NAME = "durabl-changestream"
DEFAULT_BATCH_WINDOW = 0.1

Token = Mapping[str, Any]

# -- the pipeline ---------------------------------------------------------------------------
#: What crosses the wire for each notification (plus ``_id``, the resume token).
PROJECTED_FIELDS: tuple[str, ...] = (
    "operationType",
    "documentKey",
    "fullDocument.type",
    "fullDocument.status",
    "fullDocument.run_at",
    "updateDescription.removedFields",
)


def claimable_pipeline() -> list[dict[str, Any]]:
    """The server-side stages after ``$changeStream``: only events that can make a job
    claimable, only scheduling fields. Filters read the oplog entry only (no lookups)."""
    return [
        {
            "$match": {
                "$or": [
                    {
                        "operationType": {"$in": ["insert", "replace"]},
                        "fullDocument.status": "pending",
                    },
                    {
                        "operationType": "update",
                        "$or": [
                            {"updateDescription.updatedFields.status": "pending"},
                            {"updateDescription.updatedFields.run_at": {"$exists": True}},
                            {"updateDescription.removedFields": SLOT},
                        ],
                    },
                    {"operationType": "invalidate"},
                ]
            }
        },
        {"$project": dict.fromkeys(PROJECTED_FIELDS, 1)},
    ]


def frees_a_slot(event: Mapping[str, Any]) -> bool:
    """Whether the update ``event`` removed a job's concurrency slot: the job left
    ``active``, so its key has a slot free."""
    update = event.get("updateDescription")
    removed = update.get("removedFields") if isinstance(update, Mapping) else None
    return isinstance(removed, list) and SLOT in removed


# -- errors -----------------------------------------------------------------------------------
ErrorKind = Literal["resumable", "token-lost", "fatal"]

#: InvalidResumeToken, ChangeStreamFatalError ("resume token was not found"),
#: ChangeStreamHistoryLost: reopening with the same token cannot work.
TOKEN_LOST_CODES = frozenset({260, 280, 286})


def classify(exc: BaseException) -> ErrorKind:
    """How to treat a stream error: reopen with the last token (``resumable``), reopen
    from now and resync (``token-lost``), or give up on push (``fatal``). Mirrors the
    driver's own rule: network errors, ``CursorNotFound``, timeouts and errors the server
    labels ``ResumableChangeStreamError`` are resumable."""
    if isinstance(exc, CursorNotFound):
        return "resumable"
    if isinstance(exc, OperationFailure):
        if exc.code in TOKEN_LOST_CODES:
            return "token-lost"
        if exc.has_error_label("ResumableChangeStreamError") or exc.timeout:
            return "resumable"
        return "fatal"
    if isinstance(exc, ConnectionFailure):
        return "resumable"
    if isinstance(exc, PyMongoError) and exc.timeout:
        return "resumable"
    return "fatal"


class ChangeStreamInvalidated(DurablError):
    """The watched collection was dropped or renamed; the stream restarts after it."""


# -- seams --------------------------------------------------------------------------------------
class ChangeStreamLike(Protocol):
    """What the watcher needs of a pymongo ``ChangeStream`` (and what tests fake)."""

    @property
    def resume_token(self) -> Token | None: ...

    @property
    def alive(self) -> bool: ...

    def try_next(self) -> Mapping[str, Any] | None: ...

    def close(self) -> None: ...


OpenStream = Callable[[Token | None, Token | None], ChangeStreamLike]
"""``open_stream(resume_after, start_after)``: at most one of them is set."""

Lookup = Callable[[Sequence[Any]], Iterable[tuple[str, datetime]]]
"""``lookup(ids)``: ``(type, run_at)`` of those jobs that are still pending."""

NextRunAt = Callable[[str, datetime], datetime | None]
"""``next_run_at(type, after)``: the earliest pending ``run_at`` of ``type`` after ``after``."""

Waiting = Callable[[Sequence[Any], Sequence[str]], Mapping[str, int]]
"""``waiting(ids, types)``: the jobs ``ids`` freed a slot of their concurrency key; for
each of ``types`` with a due job pending on one of those keys, how many of the freed slots
it may take (types with none are left out)."""


@dataclass(frozen=True)
class PushSettings:
    """Tuning of the watcher. The defaults suit most deployments.

    - ``batch_window``: notifications are collected this long before routing.
    - ``max_await``: how long one ``getMore`` may wait on the server (default: the batch
      window); it bounds how late a timer fires and how long ``stop()`` takes, and it sets
      the idle cost (one small ``getMore`` per ``max_await``).
    - ``timer_capacity``: future wake-ups kept in memory; beyond it the farthest are
      dropped and those jobs are found by the safety poll.
    - ``max_lookup``: update notifications looked up per batch (and as many freed
      concurrency slots); beyond it every processed type polls instead.
    - ``max_retries``: attempts to reopen the stream before falling back to polling, with
      jittered exponential backoff from ``retry_backoff`` up to ``retry_backoff_max``.
    - ``open_timeout``: bound on each attempt to open the stream.
    """

    batch_window: float = DEFAULT_BATCH_WINDOW
    max_await: float | None = None
    timer_capacity: int = 10_000
    max_lookup: int = 1_000
    max_retries: int = 5
    retry_backoff: float = 0.5
    retry_backoff_max: float = 10.0
    open_timeout: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.batch_window <= 10:
            raise ValueError(f"batch_window must be in (0, 10] seconds, got {self.batch_window}")
        if self.max_await is not None and not 0 < self.max_await <= 10:
            raise ValueError(f"max_await must be in (0, 10] seconds, got {self.max_await}")
        for name in ("timer_capacity", "max_lookup", "max_retries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.retry_backoff < 0 or self.retry_backoff_max < 0 or self.open_timeout <= 0:
            raise ValueError("retry_backoff, retry_backoff_max and open_timeout must be positive")

    @property
    def await_seconds(self) -> float:
        return self.batch_window if self.max_await is None else self.max_await
