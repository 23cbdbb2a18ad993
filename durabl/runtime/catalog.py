"""The job types one queue knows, and the jobs it builds for them.

A queue applies to a type the options given to its ``process()`` (or ``register()``),
else the type's declaration (``@durabl.job``). Every job it stores, from ``enqueue``,
``claim_or_enqueue`` or a schedule's tick, is built here under those options: the type's
defaults under the options of the call, its payload through the type's schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from durabl.model.declared import DEFAULTABLE_OPTIONS, TypeOptions, given_options
from durabl.model.options import NewJob, build_new_job
from durabl.model.schedule import Schedule
from durabl.model.subscriptions import Subscription, subscriptions_of
from durabl.runtime.declared import Declaration, Registry, registry


class TypeCatalog:
    """The per-type options of one queue, over the process-wide ``declared`` registry."""

    def __init__(self, declared: Registry = registry) -> None:
        self.declared = declared
        self._given: dict[str, TypeOptions] = {}

    def options(self, type: str) -> TypeOptions | None:
        """The options given to the queue for ``type``, else its declared ones, else None."""
        own = self._given.get(type)
        return own if own is not None else self.declared.options(type)

    def give(self, type: str, options: TypeOptions) -> None:
        """Apply ``options`` to ``type`` in this queue, over its declaration."""
        self._given[type] = options

    def new_job(
        self, type: str, data: Any, given: Mapping[str, Any], *, now: datetime | None = None
    ) -> NewJob:
        """A job checked as every enqueue checks it. ``given``: the enqueue options of the
        call (an ``EnqueueOptions``, or a schedule's); a defaultable one left at None takes
        the type's default. ``now`` turns a ``delay`` into an instant."""
        options = dict(given)
        defaultable = {name: options.pop(name, None) for name in DEFAULTABLE_OPTIONS}
        type_options = self.options(type)
        if type_options is None:
            return build_new_job(type, data, **given_options(**defaultable), **options, now=now)
        flow = type_options.flow_options(
            data, options.pop("concurrency_key", None), options.pop("concurrency_limit", None)
        )
        data = type_options.stored_data(data)
        return build_new_job(
            type, data, **type_options.enqueue_options(defaultable), **flow, **options, now=now
        )

    def tick_job(self, schedule: Schedule, tick: datetime) -> NewJob:
        """The job one tick of ``schedule`` enqueues: the schedule's options win over the
        type's defaults."""
        return self.new_job(schedule.type, schedule.data, {**schedule.options, "run_at": tick})

    def subscriptions(self) -> list[Subscription]:
        """The ``on_event`` subscriptions of every type this queue knows (its own options
        over the declared ones), sorted."""
        types = set(self.declared.types()) | set(self._given)
        found = {
            subscription
            for type in types
            if (options := self.options(type)) is not None
            for subscription in subscriptions_of(type, options.on_event)
        }
        return sorted(found)

    def declarations(self, types: Iterable[str] | None = None) -> list[Declaration]:
        """The declarations of ``types`` (None: every declared type), sorted by type;
        ``ValueError`` naming every type not declared."""
        names = self.declared.types() if types is None else sorted(set(types))
        found = [(name, self.declared.get(name)) for name in names]
        unknown = [name for name, declaration in found if declaration is None]
        if unknown:
            raise ValueError(
                f"not declared with @durabl.job: {', '.join(map(repr, unknown))}; declared: "
                f"{', '.join(map(repr, self.declared.types())) or 'none'}"
            )
        return [declaration for _, declaration in found if declaration is not None]
