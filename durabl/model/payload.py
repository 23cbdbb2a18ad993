"""Which payloads every store accepts: the portable subset of BSON. Pure: no I/O.

Both backends accept exactly these values, so a payload that works in tests on one store
works on the other: ``None``, ``bool``, ``int`` (signed 64-bit), ``float``, ``str``,
``bytes``, ``datetime`` (stored to the millisecond, returned as aware UTC), ``list`` and
``tuple`` (returned as lists), and ``dict`` with ``str`` keys. Anything else is a
``TypeError`` before any write.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from durabl.model.clock import as_utc

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
MAX_DEPTH = 100


def check_payload(data: Any, *, what: str = "job data") -> int:
    """Raise ``TypeError`` naming the offending path unless ``data`` is portable.

    Returns the size ``data`` takes as a BSON value, so every store can apply MongoDB's
    document budget to the same payloads.
    """
    return _check(data, what, 0)


#: The largest handler result a job keeps, in BSON bytes (a job's document must still fit
#: MongoDB's 16 MB with its payload, logs and history).
MAX_RESULT_BYTES = 1024 * 1024


def check_result(value: Any) -> Any:
    """A handler's return value as a job keeps it (:attr:`Job.result`). ``TypeError``
    naming the value's type unless it is portable (as job data must be), ``ValueError``
    past :data:`MAX_RESULT_BYTES`."""
    try:
        size = check_payload(value, what="result")
    except TypeError as exc:
        raise TypeError(
            f"the handler returned a {type(value).__name__}, which a job cannot keep as its "
            f"result ({exc}); return None, or JSON-like data (dict, list, str, int, float, "
            "bool, datetime)"
        ) from None
    if size > MAX_RESULT_BYTES:
        raise ValueError(
            f"the handler returned a result of {size} bytes; a job keeps at most "
            f"{MAX_RESULT_BYTES}: store large results elsewhere and return a reference"
        )
    return portable(value)


def _check(value: Any, path: str, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise TypeError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        return 5 + _check_text(value, path)
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            try:
                value.astimezone(timezone.utc)
            except OverflowError:
                raise TypeError(
                    f"{path}: {value!r} is outside the range of UTC datetimes"
                ) from None
        return 8
    if isinstance(value, float):
        return 8
    if isinstance(value, bytes):
        return 5 + len(value)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise TypeError(f"{path}: int {value} does not fit in 64 bits")
        return 4 if INT32_MIN <= value <= INT32_MAX else 8
    if isinstance(value, Mapping):
        if not isinstance(value, dict):
            raise TypeError(f"{path}: {type(value).__name__} is not storable; pass a dict")
        size = 5
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is not a str")
            if "\x00" in key:
                raise TypeError(f"{path}: key {key!r} contains a NUL character")
            size += 2 + _check_text(key, path) + _check(item, f"{path}[{key!r}]", depth + 1)
        return size
    if isinstance(value, (list, tuple)):
        size = 5
        for index, item in enumerate(value):
            size += 2 + len(str(index)) + _check(item, f"{path}[{index}]", depth + 1)
        return size
    raise TypeError(
        f"{path}: {type(value).__name__} is not storable; use None, bool, int, float, str, "
        "bytes, datetime, list or dict"
    )


def _check_text(text: str, path: str) -> int:
    """The UTF-8 length of ``text``; TypeError when it has no UTF-8 form."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise TypeError(f"{path}: string is not valid UTF-8 ({exc.reason})") from None


def to_millis(value: datetime) -> datetime:
    """``value`` as aware UTC cut to the millisecond: the precision every store keeps."""
    value = as_utc(value)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def portable(value: Any) -> Any:
    """A fresh copy of a (validated) payload as a store's round trip returns it: tuples
    become lists, datetimes aware UTC milliseconds, subclasses their base type."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, datetime):
        return to_millis(value)
    if isinstance(value, dict):
        return {str.__str__(k): portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return copy.deepcopy(value)
