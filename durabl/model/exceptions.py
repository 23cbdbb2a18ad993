"""The error tree. Every error durabl raises on purpose derives from :class:`DurablError`.

This module imports nothing from durabl so that any module may use it.
"""

from __future__ import annotations


class DurablError(Exception):
    """Base class of every error that durabl raises itself."""


class QueueShutdownError(DurablError, RuntimeError):
    """The queue is shutting down (or has shut down) and refuses new managed work."""


class DedupeScopeConflictError(DurablError, ValueError):
    """A dedupe key already has a live job under the other dedupe scope.

    A key names one logical resource, so it may live under one scope at a time; mixing
    scopes would silently give no mutual exclusion at all.
    """

    def __init__(self, dedupe_key: str, requested_scope: str, live_scope: str) -> None:
        self.dedupe_key = dedupe_key
        self.requested_scope = requested_scope
        self.live_scope = live_scope
        super().__init__(
            f"dedupe key {dedupe_key!r} has a live job under scope {live_scope!r}; "
            f"it cannot also be used with scope {requested_scope!r} until that job ends"
        )


class DocumentTooLargeError(DurablError, ValueError):
    """A job would not fit in one stored document (MongoDB's 16 MB limit, less headroom)."""


class BackendUnavailableError(DurablError):
    """The store could not be reached after bounded retries."""


class StoreNotFoundError(DurablError, FileNotFoundError):
    """The store is not there and the caller asked not to create it: no file at
    ``filename``, the absolute path, for ``SqliteJobQueue(path, create=False)``. Raised as
    ``FileNotFoundError`` is, ``StoreNotFoundError(errno.ENOENT, message, path)``."""


class PreparedStatementsError(DurablError):
    """PostgreSQL: psycopg's prepared statements (``_pg3_<n>``) were not where it left them,
    because a pooler in transaction mode (PgBouncer before 1.21, or without
    ``max_prepared_statements``) hands each transaction a different server session. A
    setting to change (``prepare_threshold=none``), not an outage: never retried."""


class SchemaError(DurablError):
    """A store's record of its schema cannot be used: corrupt, or from a newer durabl.

    durabl then refuses the store rather than guess which migrations it needs."""


class SchemaTooNewError(SchemaError):
    """The store was written by a newer durabl, with a schema this release cannot read."""


class FatalJobError(Exception):
    """Raise from a handler when no further attempt can succeed.

    The job fails at once with ``failure_kind="fatal"``; ``str(exc)`` and its ``__cause__``
    are kept in ``fail_reason``. (It is a plain ``Exception`` subclass on purpose: handler
    code raises it, durabl does not.)
    """


class NonRetryable(FatalJobError):
    """Raise from an orchestration body to end the run as ``fatal`` without retrying."""


class NondeterminismError(DurablError):
    """A resumed orchestration asked for a different step than its journal recorded."""


class JournalTooLarge(DurablError):
    """An orchestration journal would exceed its size budget."""

    def __init__(self, step: str, size: int, budget: int) -> None:
        self.step = step
        self.size = size
        self.budget = budget
        super().__init__(
            f"journal would grow to {size} bytes at step {step!r}, over its budget of "
            f"{budget} bytes: return ids or references from steps, not whole payloads"
        )


class WaitTimeout(DurablError):
    """``octx.gather``'s timeout passed before every child it waits for had ended."""


class ScheduleError(DurablError, ValueError):
    """A schedule declaration that cannot work: a bad cron expression, an unknown time
    zone, both or neither of ``cron`` and ``every``, an unknown ``catch_up`` policy."""
