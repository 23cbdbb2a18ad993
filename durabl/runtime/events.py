"""Events that start jobs: ``send_event``, the subscriptions a queue records in its store,
``list_subscriptions`` and ``unsubscribe``. :class:`EventSending` is a base class of
:class:`durabl.JobQueue` (through it, of :class:`~durabl.runtime.enqueuing.Enqueuing`):
its methods are the queue's own.

The decisions are made here, once for every store: which jobs a send starts (one of every
subscribed type, each through ``enqueue``, so type defaults, schemas, hooks and an
immediate queue apply), the dedupe key each carries, what a repeated orchestration step
finds. A store only keeps the subscriptions (``Backend.upsert_subscriptions`` ...).
"""

from __future__ import annotations

import threading
from typing import Any

from durabl.model.job import Job
from durabl.model.options import check_dedupe_key
from durabl.model.payload import check_payload
from durabl.model.reports import JobEvent
from durabl.model.subscriptions import (
    Subscription,
    check_event,
    event_dedupe_key,
    subscriptions_of,
)
from durabl.runtime.enqueuing import Enqueuing

#: How many jobs a search for an earlier send's job reads (its dedupe key is exact and
#: unique while live; more than one is a retried or coalesced history of the same job).
_EARLIER_SEND_LIMIT = 20


def _scope(key: str | None) -> str | None:
    """A keyed send's jobs hold their key while pending or active, whatever their type's
    default scope."""
    return None if key is None else "pending+active"


class RecordedSubscriptions:
    """The subscriptions a queue has written to its store (so each is written once per
    process, not at every send). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: set[Subscription] = set()

    def new(self, subscriptions: list[Subscription]) -> list[Subscription]:
        with self._lock:
            return [s for s in subscriptions if s not in self._written]

    def written(self, subscriptions: list[Subscription]) -> None:
        with self._lock:
            self._written.update(subscriptions)


class EventSending(Enqueuing):
    """Where a :class:`durabl.JobQueue` sends events and keeps its subscriptions. Uses
    :meth:`enqueue`, the store (``_ready()``), its ``types`` (the ``on_event`` of every
    type the queue knows) and its event sinks (``event-sent``)."""

    recorded_subscriptions: RecordedSubscriptions

    def emit(self, event: JobEvent) -> None:
        raise NotImplementedError

    def listens(self, kind: str) -> bool:
        raise NotImplementedError

    def send_event(self, event: str, data: Any = None, dedupe_key: str | None = None) -> list[str]:
        """Start one job of every type subscribed to ``event`` (``job.data`` is ``data``;
        None: ``{}``) and return their ids, by type; ``[]`` when no type is subscribed.

        ``dedupe_key``: while the jobs a send with this key started are pending or active,
        sending again with it starts nothing more (``[]``); two senders racing with one key
        start one job of each type between them (each type's job: the store's unique
        dedupe slot decides). ``ValueError``/``TypeError`` for a bad event name, key or
        payload, before anything is written."""
        return self._send(event, data, dedupe_key, find_earlier=False)

    def send_event_once(self, event: str, data: Any, dedupe_key: str) -> list[str]:
        """:meth:`send_event`, where the jobs an earlier send with ``dedupe_key`` started
        count as sent even once they finished (as long as they are stored: not pruned or
        deleted), so a repeated send returns their ids and starts no other. One search
        per subscribed type before its enqueue: what ``octx.send_event`` uses, so a step
        run again after a crash does not start the event's jobs twice."""
        return self._send(event, data, dedupe_key, find_earlier=True)

    def list_subscriptions(self) -> list[Subscription]:
        """Every stored subscription (``Subscription(event, type)``), by event and type:
        those of every process that recorded its ``on_event`` declarations."""
        self.record_subscriptions()
        return self._ready().load_subscriptions()

    def unsubscribe(self, type: str, event: str) -> bool:
        """Remove the subscription of ``type`` to ``event`` from the store: sending the
        event no longer starts that type's jobs. False when it was not stored. A process
        that still declares it records it again when its queue next starts."""
        subscription = subscriptions_of(type, [check_event(event)])[0]
        return self._ready().delete_subscription(subscription)

    def record_subscriptions(self) -> None:
        """Store the ``on_event`` subscriptions of every type this queue knows (declared
        in this process or given to :meth:`process`) that it has not stored yet."""
        new = self.recorded_subscriptions.new(self.types.subscriptions())
        backend = self._ready()
        if new and backend.supports_subscriptions:  # else send_event says it cannot
            backend.upsert_subscriptions(new)
            self.recorded_subscriptions.written(new)

    # -- inside ----------------------------------------------------------------------------
    def _send(
        self, event: str, data: Any, dedupe_key: str | None, *, find_earlier: bool
    ) -> list[str]:
        check_event(event)
        data = {} if data is None else data
        check_payload(data)
        if dedupe_key is not None:
            check_dedupe_key(dedupe_key)
        self.record_subscriptions()
        subscribed = self._ready().load_subscriptions(event)
        keys = {
            s.type: None if dedupe_key is None else event_dedupe_key(event, dedupe_key, s.type)
            for s in subscribed
        }
        for type, key in keys.items():
            # Every job checked (its type's schema and defaults included) before the first
            # is stored: a send is refused whole, never half done.
            self.types.new_job(type, data, {"dedupe_key": key, "dedupe_scope": _scope(key)})
        ids: list[str] = []
        for subscription in subscribed:
            key = keys[subscription.type]
            earlier = self._earlier_job(subscription.type, key) if find_earlier else None
            if earlier is not None:
                ids.append(earlier)
                continue
            job_id = self.enqueue(subscription.type, data, dedupe_key=key, dedupe_scope=_scope(key))
            if job_id is not None:
                ids.append(job_id)
        if self.listens("event-sent"):
            self.emit(JobEvent("event-sent", extra={"event": event, "job_ids": tuple(ids)}))
        return ids

    def _earlier_job(self, type: str, key: str | None) -> str | None:
        """The id of a stored job of ``type`` holding exactly ``key``, if any."""
        if key is None:
            return None
        found: list[Job[Any]] = self._ready().list_jobs(
            type=type, search=key, limit=_EARLIER_SEND_LIMIT
        )
        return next((job.id for job in found if job.dedupe_key == key), None)
