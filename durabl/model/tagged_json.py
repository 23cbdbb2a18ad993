"""Portable values <-> tagged JSON text, and instants <-> epoch milliseconds: the encoding
the SQL stores (SQLite, PostgreSQL) keep payloads and journals in.

The text brings back exactly the portable values of :mod:`durabl.model.payload`, as a BSON
round trip through MongoDB would:

- ``bytes`` are ``{"$b": "<base64>"}``;
- ``nan`` and the infinities are ``{"$f": "nan" | "inf" | "-inf"}`` (so the text stays
  valid JSON that a database's own JSON functions can read);
- datetimes are ``{"$d": <UTC epoch milliseconds>}`` and come back as aware UTC datetimes
  cut to the millisecond (a naive datetime is taken to be UTC, as pymongo does);
- lists and tuples are arrays (tuples come back as lists);
- a dict is an object, unless one of its keys starts with ``$``: then it is wrapped as
  ``{"$o": {...}}`` so that no user dict can be mistaken for a tagged value.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from datetime import datetime, timedelta, timezone
from typing import Any

from durabl.model.exceptions import DurablError

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)
_MIN_MS = (datetime.min.replace(tzinfo=timezone.utc) - EPOCH) // _ONE_MS
_MAX_MS = (datetime.max.replace(tzinfo=timezone.utc) - EPOCH) // _ONE_MS

BYTES_TAG = "$b"
DATETIME_TAG = "$d"
FLOAT_TAG = "$f"
OBJECT_TAG = "$o"
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# -- instants ---------------------------------------------------------------------------------
def to_ms(value: datetime) -> int:
    """Milliseconds since the epoch (UTC), rounded down; naive values are taken as UTC."""
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - EPOCH) // _ONE_MS


def ceil_ms(value: datetime) -> int:
    """The smallest whole millisecond at or after ``value`` (aware)."""
    return -((EPOCH - value) // _ONE_MS)


@functools.lru_cache(maxsize=1024)
def from_ms(ms: int) -> datetime:
    """An aware UTC datetime from epoch milliseconds. (Cached: the rows of one claim often
    share instants, and datetimes are immutable.)"""
    try:
        return EPOCH + timedelta(milliseconds=ms)
    except OverflowError as exc:
        raise DurablError(f"stored instant {ms} ms is outside the datetime range") from exc


# -- payloads ---------------------------------------------------------------------------------
def encode_payload(value: Any) -> str:
    """JSON text for a portable value (see the module docstring)."""
    return json.dumps(_encode(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def decode_payload(text: str) -> Any:
    if "$" not in text:  # no tagged value, no wrapped dict: plain JSON is the value itself
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
        return {FLOAT_TAG: "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")}
    if isinstance(value, bytes):
        return {BYTES_TAG: base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime):
        ms = to_ms(value)
        if not _MIN_MS <= ms <= _MAX_MS:
            raise TypeError(f"datetime {value!r} is outside the range a store can read back in UTC")
        return {DATETIME_TAG: ms}
    if isinstance(value, dict):
        encoded = {str.__str__(key): _encode(item) for key, item in value.items()}
        if any(key.startswith("$") for key in encoded):
            return {OBJECT_TAG: encoded}
        return encoded
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
    if tag == OBJECT_TAG:
        return {key: _decode(item) for key, item in inner.items()}
    if tag == BYTES_TAG:
        return base64.b64decode(inner)
    if tag == DATETIME_TAG:
        return from_ms(inner)
    if tag == FLOAT_TAG:
        return _SPECIAL_FLOATS[inner]
    raise DurablError(f"stored payload has an unknown tag {tag!r}")
