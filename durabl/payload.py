"""Which payloads every store accepts: the portable subset of BSON. Pure: no I/O.

Both backends accept exactly these values, so a payload that works in tests on one store
works on the other: ``None``, ``bool``, ``int`` (signed 64-bit), ``float``, ``str``,
``bytes``, ``datetime`` (stored to the millisecond, returned as aware UTC), ``list`` and
``tuple`` (returned as lists), and ``dict`` with ``str`` keys. Anything else is a
``TypeError`` before any write.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_DEPTH = 100


def check_payload(data: Any, *, what: str = "job data") -> None:
    """Raise ``TypeError`` naming the offending path unless ``data`` is portable."""
    _check(data, what, 0)


def _check(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise TypeError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _check_text(value, path)
        return
    if value is None or isinstance(value, (bool, float, bytes, datetime)):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise TypeError(f"{path}: int {value} does not fit in 64 bits")
        return
    if isinstance(value, Mapping):
        if not isinstance(value, dict):
            raise TypeError(f"{path}: {type(value).__name__} is not storable; pass a dict")
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is not a str")
            if "\x00" in key:
                raise TypeError(f"{path}: key {key!r} contains a NUL character")
            _check_text(key, path)
            _check(item, f"{path}[{key!r}]", depth + 1)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth + 1)
        return
    raise TypeError(
        f"{path}: {type(value).__name__} is not storable; use None, bool, int, float, str, "
        "bytes, datetime, list or dict"
    )


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TypeError(f"{path}: string is not valid UTF-8 ({exc.reason})") from None
