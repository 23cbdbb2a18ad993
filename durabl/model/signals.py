"""Signals: named messages sent to one job (``queue.signal``) that an orchestration waits for
(``octx.wait_for_signal``). The rules of a signal's name and data, what a store keeps of
one, and what a waiting job's ``waiting_for`` says. Pure: no I/O.

A signal is stored with its job, numbered by ``seq`` (increasing in the order the job's
signals were stored), and never removed before its job: an orchestration consumes them by
journaling the ``seq`` of the one each wait received, and the next wait for the same name
takes the first stored after it. So a crash between reading a signal and journaling it
neither loses it nor delivers it twice.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from durabl.model.payload import check_payload, portable

#: The longest signal name, in bytes of UTF-8.
MAX_SIGNAL_NAME_BYTES = 200
#: The largest data one signal carries, in BSON bytes (signals live on their job, which
#: must still fit MongoDB's document).
MAX_SIGNAL_BYTES = 256 * 1024
#: The due time of a job that waits for a signal without a timeout: far enough that only
#: the signal wakes it, near enough that every store's instant type holds it.
WAIT_FOREVER = datetime(9000, 1, 1, tzinfo=timezone.utc)
#: ``Job.waiting_for`` of a job that waits for the signal ``<name>``.
WAITING_PREFIX = "signal:"


@dataclass(frozen=True)
class Signal:
    """A signal as a wait receives it: its ``name``, its ``data`` and when it was stored
    (``sent_at``, the store's clock)."""

    name: str
    data: Any
    sent_at: datetime


@dataclass(frozen=True)
class StoredSignal:
    """A signal as its job's store keeps it: ``seq`` orders the job's signals."""

    seq: int
    signal: Signal


@dataclass(frozen=True)
class SignalDelivery:
    """What sending a signal did: stored as ``seq`` on job ``job_id`` of ``type``, and
    ``woken`` when the job waited for it and was made due by this send."""

    job_id: str
    type: str
    seq: int
    woken: bool


def check_signal_name(name: object) -> str:
    """``name`` if it can name a signal: a non-empty string without control characters, at
    most :data:`MAX_SIGNAL_NAME_BYTES`; ``TypeError``/``ValueError`` otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"signal name must be a str such as 'approved', got {name!r}")
    if not name or name.isspace():
        raise ValueError(f"signal name must be a non-empty string, got {name!r}")
    if any(unicodedata.category(char) == "Cc" for char in name):
        raise ValueError(f"signal name must not contain control characters, got {name[:40]!r}")
    if len(name.encode("utf-8", "replace")) > MAX_SIGNAL_NAME_BYTES:
        raise ValueError(
            f"signal name must be at most {MAX_SIGNAL_NAME_BYTES} bytes, got {name[:40]!r}..."
        )
    return name


def checked_signal_data(name: str, data: Any) -> Any:
    """``data`` as a store keeps it (a fresh portable copy), under the payload rules of job
    data; ``TypeError`` naming what is not portable, ``ValueError`` past
    :data:`MAX_SIGNAL_BYTES`."""
    size = check_payload(data, what=f"data of signal {name!r}")
    if size > MAX_SIGNAL_BYTES:
        raise ValueError(
            f"data of signal {name!r} takes {size} bytes; at most {MAX_SIGNAL_BYTES} "
            "(send an id and keep large data elsewhere)"
        )
    return portable(data)


def waiting_for_signal(name: str) -> str:
    """``Job.waiting_for`` of a job waiting for the signal ``name``."""
    return WAITING_PREFIX + name
