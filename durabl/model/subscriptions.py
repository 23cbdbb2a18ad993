"""Event subscriptions: which job types an event starts, and the rules of an event's name,
of the types a declaration subscribes, and of the dedupe keys a sent event's jobs carry.
Pure: no I/O.

A subscription is stored (``Backend.upsert_subscriptions``), so a process that never
imported a worker's module still starts that worker's jobs; sending an event
(``JobQueue.send_event``) enqueues one job of every subscribed type.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from durabl.model.options import check_job_type

#: The longest event name, in bytes of UTF-8 (a dedupe key holds it with the type).
MAX_EVENT_BYTES = 200


@dataclass(frozen=True, order=True)
class Subscription:
    """Jobs of ``type`` start when ``event`` is sent."""

    event: str
    type: str


def check_event(event: object) -> str:
    """``event`` if it can name an event: a non-empty string without control characters,
    at most :data:`MAX_EVENT_BYTES`; ``TypeError``/``ValueError`` naming it otherwise."""
    if not isinstance(event, str):
        raise TypeError(f"event must be a str such as 'billing/invoice.sync', got {event!r}")
    if not event or event.isspace():
        raise ValueError(f"event must be a non-empty string, got {event!r}")
    if any(unicodedata.category(char) == "Cc" for char in event):
        raise ValueError(f"event must not contain control characters, got {event[:40]!r}")
    if len(event.encode("utf-8", "replace")) > MAX_EVENT_BYTES:
        raise ValueError(f"event must be at most {MAX_EVENT_BYTES} bytes, got {event[:40]!r}...")
    return event


def subscribed_events(on_event: object) -> tuple[str, ...]:
    """The events of a declaration's ``on_event`` (one name or a tuple of names), each
    checked, without repeats, in the order given."""
    names: Iterable[object]
    if isinstance(on_event, str):
        names = (on_event,)
    elif isinstance(on_event, (tuple, list, frozenset, set)):
        names = sorted(on_event) if isinstance(on_event, (set, frozenset)) else on_event
        if not names:
            raise ValueError("on_event must name at least one event")
    else:
        raise TypeError(f"on_event must be an event name or a tuple of them, got {on_event!r}")
    return tuple(dict.fromkeys(check_event(name) for name in names))


def subscriptions_of(type: str, events: Iterable[str]) -> list[Subscription]:
    """One subscription of ``type`` to each of ``events``."""
    check_job_type(type)
    return [Subscription(event, type) for event in events]


def event_dedupe_key(event: str, key: str, type: str) -> str:
    """The dedupe key of the job of ``type`` an event sent with ``key`` starts: while that
    job is pending or active, sending the event with the same key starts no other (the
    store's unique slot decides, so two senders racing start one job of each type)."""
    return f"event:{event}:{key}:{type}"


def step_event_key(step_key: str) -> str:
    """The dedupe key an orchestration's ``send_event`` step sends with, from the step's
    own idempotency key (the job's id, the step's name and position): the same on every
    run of that step, so a run repeated after a crash starts nothing new, and another for
    each step of a body that sends in a loop."""
    return f"step:{step_key}"
