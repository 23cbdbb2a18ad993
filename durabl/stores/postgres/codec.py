"""Values <-> PostgreSQL columns: the JSON payload codec and rows back to
:class:`~durabl.model.job.Job`.

Payloads and journals are JSON *text*, tagged so that they bring back exactly the portable
values of :mod:`durabl.model.payload` (the same scheme as the SQLite store's):

- ``None``, ``bool``, ``int``, finite ``float`` and ``str`` are plain JSON;
- ``nan`` and the infinities are ``{"$f": "nan" | "inf" | "-inf"}``;
- ``bytes`` are ``{"$b": "<base64>"}``;
- datetimes are ``{"$d": <UTC epoch milliseconds>}``, back as aware UTC milliseconds;
- lists and tuples are arrays; a dict with a key starting with ``$`` is ``{"$o": {...}}``.

Text, not ``jsonb``: ``jsonb`` refuses ``\\u0000`` in strings, turns ``1e300`` into an
integer and reorders keys, and a payload must come back as it went in. (JSON text never
holds a raw NUL, which a PostgreSQL ``text`` value cannot.) Instants are ``timestamptz``
at millisecond precision.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from durabl.model.clock import as_utc
from durabl.model.exceptions import DurablError
from durabl.model.job import Job, LogEntry, job_from_fields
from durabl.model.options import MAX_LOG_MESSAGE_BYTES, clip_text
from durabl.model.payload import to_millis

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)
_MIN_MS = (datetime.min.replace(tzinfo=timezone.utc) - EPOCH) // _ONE_MS
_MAX_MS = (datetime.max.replace(tzinfo=timezone.utc) - EPOCH) // _ONE_MS
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def to_ms(value: datetime) -> int:
    """Milliseconds since the epoch (UTC), rounded down; naive values are taken as UTC."""
    return (as_utc(value) - EPOCH) // _ONE_MS


def from_ms(ms: int) -> datetime:
    try:
        return EPOCH + timedelta(milliseconds=ms)
    except OverflowError as exc:
        raise DurablError(f"stored instant {ms} ms is outside the datetime range") from exc


def instant(value: datetime | None) -> datetime | None:
    """A parameter instant: aware UTC, cut to the millisecond (what every store keeps)."""
    return None if value is None else to_millis(value)


def utc(value: datetime) -> datetime:
    """A ``timestamptz`` read back (in the session's zone) as UTC."""
    return value.astimezone(timezone.utc)


# -- payloads ---------------------------------------------------------------------------------
def encode_payload(value: Any) -> str:
    return json.dumps(_encode(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def decode_payload(text: str) -> Any:
    if "$" not in text:  # no tagged value: plain JSON is the value itself
        return json.loads(text)
    return _decode(json.loads(text))


def _encode(value: Any) -> Any:
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        number = float(value)
        if math.isfinite(number):
            return number
        return {"$f": "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")}
    if isinstance(value, bytes):
        return {"$b": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime):
        ms = to_ms(value)
        if not _MIN_MS <= ms <= _MAX_MS:
            raise TypeError(f"datetime {value!r} is outside the range a store can read back in UTC")
        return {"$d": ms}
    if isinstance(value, dict):
        encoded = {str.__str__(key): _encode(item) for key, item in value.items()}
        return {"$o": encoded} if any(key.startswith("$") for key in encoded) else encoded
    if isinstance(value, (list, tuple)):
        return [_encode(item) for item in value]
    raise TypeError(f"{type(value).__name__} is not storable")


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, inner),) = value.items()
            if key.startswith("$"):
                return _decode_tagged(key, inner)
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def _decode_tagged(tag: str, inner: Any) -> Any:
    if tag == "$o":
        return {key: _decode(item) for key, item in inner.items()}
    if tag == "$b":
        return base64.b64decode(inner)
    if tag == "$d":
        return from_ms(inner)
    if tag == "$f":
        return _SPECIAL_FLOATS[inner]
    raise DurablError(f"stored payload has an unknown tag {tag!r}")


def encode_journal(records: Sequence[Any]) -> str:
    """A JSON array of journal records (appended server-side to the stored array)."""
    return encode_payload(list(records))


def decode_journal(text: str | None) -> tuple[dict[str, Any], ...]:
    return () if text is None else tuple(decode_payload(text))


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
    return job_from_fields(
        {
            "id": row["id"],
            "type": row["type"],
            "data": decode_payload(row["data"]),
            "status": row["status"],
            "priority": row["priority"],
            "run_at": utc(row["run_at"]),
            "attempts": row["attempts"],
            "max_attempts": row["max_attempts"],
            "dedupe_key": row["dedupe_key"],
            "dedupe_scope": row["dedupe_scope"],
            "created_at": utc(row["created_at"]),
            "updated_at": utc(row["updated_at"]),
            "fail_reason": row["fail_reason"],
            "failure_kind": row["failure_kind"],
            "logs": tuple(LogEntry(from_ms(at), message) for at, message in row["logs"]),
            "backoff": row["backoff"],
            "backoff_delay": float(row["backoff_delay"]),
            "backoff_max_delay": float(row["backoff_max_delay"]),
            "journal": decode_journal(row["journal"]),
        }
    )
