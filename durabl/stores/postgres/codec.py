"""Values <-> PostgreSQL columns: payloads and journals as tagged JSON text
(:mod:`durabl.model.tagged_json`, shared with the SQLite store) and rows back to
:class:`~durabl.model.job.Job`.

Text, not ``jsonb``: ``jsonb`` refuses ``\\u0000`` in strings, turns ``1e300`` into an
integer and reorders keys, and a payload must come back as it went in. (JSON text never
holds a raw NUL, which a PostgreSQL ``text`` value cannot.) Instants are ``timestamptz``
at millisecond precision.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from durabl.model.job import Job, LogEntry, clip_text
from durabl.model.options import MAX_LOG_MESSAGE_BYTES, NewJob
from durabl.model.payload import to_millis
from durabl.model.rows import job_from_row
from durabl.model.tagged_json import decode_payload, encode_payload, from_ms
from durabl.stores.sql.rows import new_job_params

__all__ = ["decode_payload", "encode_payload", "from_ms"]


def instant(value: datetime | None) -> datetime | None:
    """A parameter instant: aware UTC, cut to the millisecond (what every store keeps)."""
    return None if value is None else to_millis(value)


def utc(value: datetime) -> datetime:
    """A ``timestamptz`` read back (in the session's zone) as UTC."""
    return value.astimezone(timezone.utc)


def new_row(job: NewJob, now: datetime | None) -> dict[str, Any]:
    """The parameters of a new job's insert (``run_at`` None: due at the statement's
    ``now``)."""
    row = new_job_params(job, instant(job.run_at))
    row["now"] = now
    return row


# -- logs -------------------------------------------------------------------------------------
def log_message(message: str) -> str:
    """A message as stored: clipped, NUL replaced (a ``text`` value cannot hold one)."""
    return clip_text(message, MAX_LOG_MESSAGE_BYTES).replace("\x00", "\ufffd")


def log_params(pairs: Iterable[tuple[str, LogEntry]]) -> dict[str, list[Any]]:
    """The arrays of the ``add_logs`` statement, for (job id, entry) pairs in order."""
    job_ids: list[str] = []
    ats: list[datetime] = []
    messages: list[str] = []
    for job_id, entry in pairs:
        job_ids.append(job_id)
        ats.append(to_millis(entry.at))
        messages.append(log_message(entry.message))
    return {"job_ids": job_ids, "ats": ats, "messages": messages}


# -- rows -------------------------------------------------------------------------------------
def to_job(row: dict[str, Any]) -> Job[Any]:
    logs = (LogEntry(from_ms(at), message) for at, message in row["logs"])
    return job_from_row(row, instant=utc, logs=logs)
