"""Per-type options of a declared job type: enqueue defaults, payload schema, dead-letter
hook, and the flow-control settings kept for later. Pure: validation and merging only.

``@durabl.job(...)`` and ``queue.process(type, handler, ...)`` build one
:class:`TypeOptions` each; ``JobQueue.enqueue`` merges its :attr:`~TypeOptions.defaults`
under the options of the call (:meth:`TypeOptions.enqueue_options`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from durabl.model.clock import Seconds, to_seconds
from durabl.model.job import Job
from durabl.model.options import build_new_job, check_job_type, check_timeout
from durabl.model.schema import PayloadSchema
from durabl.model.subscriptions import subscribed_events

#: The enqueue options a declared type may set defaults for (None: not set).
DEFAULTABLE_OPTIONS = (
    "priority",
    "max_attempts",
    "dedupe_scope",
    "backoff",
    "backoff_delay",
    "backoff_max_delay",
)

DeadLetterHook = Callable[[Job[Any]], object]
ConcurrencyKey = str | Callable[[Any], "str | None"]


@dataclass(frozen=True)
class TypeOptions:
    """What a process knows about one job type beyond its handler.

    ``concurrency_key``, ``concurrency_limit`` are defaults of every enqueue of the type
    (:meth:`flow_options`) and ``rate_limit`` is stored when the type's workers start
    (see docs/flow-control.md)."""

    type: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    schema: PayloadSchema | None = None
    on_dead_letter: DeadLetterHook | None = None
    concurrency_key: ConcurrencyKey | None = None
    concurrency_limit: int | None = None
    rate_limit: tuple[int, float] | None = None
    #: The time limit of each run of the type, in seconds (a job's own ``timeout`` wins).
    timeout: float | None = None
    #: The events that start a job of the type (``on_event``), recorded in the store as
    #: subscriptions when a queue starts (docs/workflows.md).
    on_event: tuple[str, ...] = ()

    def enqueue_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The options of one enqueue: ``given`` (its None values meaning "not given"),
        the type's defaults under them; options neither sets are left out, so the
        library-wide defaults apply."""
        merged = {name: value for name, value in self.defaults.items()}
        merged.update({name: value for name, value in given.items() if value is not None})
        return merged

    def flow_options(self, data: Any, key: str | None, limit: int | None) -> dict[str, Any]:
        """The concurrency options of one enqueue of ``data``: the key given, else the
        type's (a callable is called with the payload; its None means no key); the limit
        given, else the type's, whenever there is a key."""
        if key is None and self.concurrency_key is not None:
            declared = self.concurrency_key
            key = declared(data) if callable(declared) else declared
        if key is not None and limit is None:
            limit = self.concurrency_limit
        return {"concurrency_key": key, "concurrency_limit": limit}

    def stored_data(self, data: Any) -> Any:
        """``data`` as an enqueue stores it: validated against the schema and dumped in
        JSON mode when there is one (``PayloadValidationError`` otherwise), else as is."""
        return data if self.schema is None else self.schema.to_stored(self.type, data)


def given_options(**options: Any) -> dict[str, Any]:
    """The options of a call that were given (not None)."""
    return {name: value for name, value in options.items() if value is not None}


#: The options of :class:`DeclaredOptions` that say how a type's workers run it.
PROCESS_OPTIONS = ("concurrency", "poll_interval", "heartbeat_interval")


@dataclass(frozen=True, kw_only=True)
class DeclaredOptions:
    """The options ``@durabl.job``, ``queue.process`` and ``queue.register`` take after
    the type (and the handler), as given and not yet checked: how the type's workers run
    it (:data:`PROCESS_OPTIONS`), then its per-type options (None: not given). Each of
    them lists these as its keyword parameters and passes them on in one of these;
    :func:`build_type_options` checks the per-type ones."""

    concurrency: int = 1
    poll_interval: Seconds | None = None
    heartbeat_interval: Seconds | None = None
    schema: Any = None
    on_dead_letter: DeadLetterHook | None = None
    max_attempts: int | None = None
    priority: int | None = None
    dedupe_scope: str | None = None
    backoff: str | None = None
    backoff_delay: Seconds | None = None
    backoff_max_delay: Seconds | None = None
    concurrency_key: ConcurrencyKey | None = None
    concurrency_limit: int | None = None
    rate_limit: tuple[int, Seconds] | None = None
    timeout: Seconds | None = None
    on_event: str | tuple[str, ...] | None = None

    def given_type_options(self) -> dict[str, Any]:
        """The per-type options given (not None), by name."""
        return {
            option.name: getattr(self, option.name)
            for option in fields(self)
            if option.name not in PROCESS_OPTIONS and getattr(self, option.name) is not None
        }


def build_type_options(type: str, options: DeclaredOptions) -> TypeOptions:
    """Check every per-type option of ``options`` (``ValueError``/``TypeError`` naming
    it) and build the type's :class:`TypeOptions`. No I/O; a schema is adapted by
    pydantic here."""
    check_job_type(type)
    defaults = {
        name: getattr(options, name)
        for name in DEFAULTABLE_OPTIONS
        if getattr(options, name) is not None
    }
    build_new_job(type, None, **defaults)  # the defaults obey the enqueue rules
    on_dead_letter = options.on_dead_letter
    if on_dead_letter is not None and not callable(on_dead_letter):
        raise TypeError(f"on_dead_letter must be callable(job), got {on_dead_letter!r}")
    concurrency_key = options.concurrency_key
    if concurrency_key is not None and not (
        isinstance(concurrency_key, str) or callable(concurrency_key)
    ):
        raise TypeError(
            f"concurrency_key must be a string or a callable(data) -> str | None, "
            f"got {concurrency_key!r}"
        )
    concurrency_limit = options.concurrency_limit
    if concurrency_limit is not None and (
        isinstance(concurrency_limit, bool)
        or not isinstance(concurrency_limit, int)
        or concurrency_limit < 1
    ):
        raise ValueError(
            f"concurrency_limit must be an int >= 1 or None, got {concurrency_limit!r}"
        )
    return TypeOptions(
        type=type,
        defaults=defaults,
        schema=None if options.schema is None else PayloadSchema(options.schema),
        on_dead_letter=on_dead_letter,
        concurrency_key=concurrency_key,
        concurrency_limit=concurrency_limit,
        rate_limit=None if options.rate_limit is None else _check_rate_limit(options.rate_limit),
        timeout=check_timeout(options.timeout),
        on_event=() if options.on_event is None else subscribed_events(options.on_event),
    )


def _check_rate_limit(rate_limit: object) -> tuple[int, float]:
    if not isinstance(rate_limit, tuple) or len(rate_limit) != 2:
        raise ValueError(f"rate_limit must be a (limit, per_seconds) pair, got {rate_limit!r}")
    limit, per = rate_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"rate_limit's limit must be an int >= 1, got {limit!r}")
    seconds = to_seconds(per, "rate_limit's period")
    if seconds <= 0:
        raise ValueError(f"rate_limit's period must be positive, got {per!r}")
    return limit, seconds
