"""``settings.DURABL``, read lazily through a typed object: ``durabl_settings.URL``.

Nothing is read at import. The first attribute access reads ``settings.DURABL`` (a dict)
and caches each value; :meth:`DurablSettings.reload` (connected to Django's
``setting_changed`` signal by the app) forgets them, so ``override_settings(DURABL=...)``
takes effect at once. Values are returned as given: :func:`settings_problems` says what is
wrong with them (the system checks and the queue factory both use it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from django.conf import settings

SETTING_NAME: Final = "DURABL"

DEFAULTS: Final[Mapping[str, Any]] = {
    "URL": "sqlite:///durabl.sqlite3",
    "DATABASE": None,
    "COLLECTION": "durabl_jobs",
    "VISIBILITY_TIMEOUT": 300,
    "CHANGE_STREAMS": False,
    "EVENT_SINK": None,
    "BACKEND": None,
    "ADMIN_LAG_THRESHOLD": 300,
    "SHUTDOWN_TIMEOUT": 30,
    "SCHEDULES": {},
    "METRICS_TOKEN": None,
    "TRACING": False,
}

#: What each key must hold, in words (for the E002 message).
EXPECTED: Final[Mapping[str, str]] = {
    "URL": "a backend URL string",
    "DATABASE": "a database name string or None",
    "COLLECTION": "a non-empty collection name string",
    "VISIBILITY_TIMEOUT": "a positive number of seconds or a timedelta",
    "CHANGE_STREAMS": "True or False",
    "EVENT_SINK": "a dotted path string or None",
    "BACKEND": "a dotted path string or None",
    "ADMIN_LAG_THRESHOLD": "a positive number of seconds or a timedelta",
    "SHUTDOWN_TIMEOUT": "a positive number of seconds or a timedelta",
    "SCHEDULES": "a dict of schedule name -> dict of durabl.schedule() arguments with 'type'",
    "METRICS_TOKEN": "a non-empty token string or None",
    "TRACING": "True or False",
}

_DURATIONS: Final = ("VISIBILITY_TIMEOUT", "ADMIN_LAG_THRESHOLD", "SHUTDOWN_TIMEOUT")


class DurablSettings:
    """``settings.DURABL`` with defaults. Attribute reads are lazy and cached."""

    URL: str
    DATABASE: str | None
    COLLECTION: str
    VISIBILITY_TIMEOUT: float | timedelta
    CHANGE_STREAMS: bool
    EVENT_SINK: str | None
    BACKEND: str | None
    ADMIN_LAG_THRESHOLD: float | timedelta
    SCHEDULES: Mapping[str, Mapping[str, Any]]
    SHUTDOWN_TIMEOUT: float | timedelta
    METRICS_TOKEN: str | None
    TRACING: bool

    def __init__(self) -> None:
        self._cached: set[str] = set()

    def __repr__(self) -> str:
        return f"<DurablSettings {self.user_settings()!r}>"

    def user_settings(self) -> Any:
        """``settings.DURABL`` exactly as configured (``{}`` when absent)."""
        return getattr(settings, SETTING_NAME, {})

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"{SETTING_NAME} has no setting {name!r}")
        user = self.user_settings()
        value = user.get(name, DEFAULTS[name]) if isinstance(user, Mapping) else DEFAULTS[name]
        setattr(self, name, value)
        self._cached.add(name)
        return value

    def is_set(self, name: str) -> bool:
        """Whether ``settings.DURABL`` gives ``name`` a value other than its default."""
        user = self.user_settings()
        return isinstance(user, Mapping) and name in user and user[name] != DEFAULTS[name]

    def reload(self) -> None:
        """Forget every cached value; the next read sees the current settings."""
        for name in self._cached:
            self.__dict__.pop(name, None)
        self._cached.clear()

    def seconds(self, name: str) -> float:
        """A duration setting as seconds (call after :func:`settings_problems` is clean)."""
        value = getattr(self, name)
        return value.total_seconds() if isinstance(value, timedelta) else float(value)


durabl_settings = DurablSettings()


@dataclass(frozen=True)
class Problem:
    """One thing wrong with ``settings.DURABL``; ``id`` is the system check id."""

    id: str
    msg: str
    hint: str | None = None


def _is_seconds(value: object) -> bool:
    if isinstance(value, timedelta):
        return value > timedelta(0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and value > 0


def _type_ok(name: str, value: object) -> bool:
    if name in _DURATIONS:
        return _is_seconds(value)
    if name in ("CHANGE_STREAMS", "TRACING"):
        return isinstance(value, bool)
    if name == "COLLECTION":
        return isinstance(value, str) and bool(value)
    if name == "URL":
        return isinstance(value, str)
    if name == "SCHEDULES":
        return isinstance(value, Mapping) and all(
            isinstance(key, str) and isinstance(entry, Mapping) and "type" in entry
            for key, entry in value.items()
        )
    return value is None or (isinstance(value, str) and bool(value))


def settings_problems() -> list[Problem]:
    """E001 (unknown keys) and E002 (wrong types) for ``settings.DURABL``; no I/O."""
    user = durabl_settings.user_settings()
    if not isinstance(user, Mapping):
        return [
            Problem(
                "durabl.E002",
                f"settings.{SETTING_NAME} must be a dict, not {type(user).__name__}.",
                hint=f"For example {SETTING_NAME} = {{'URL': 'sqlite:///durabl.sqlite3'}}.",
            )
        ]
    problems: list[Problem] = []
    unknown = sorted(str(key) for key in user if key not in DEFAULTS)
    if unknown:
        problems.append(
            Problem(
                "durabl.E001",
                f"settings.{SETTING_NAME} has unknown key(s): {', '.join(unknown)}.",
                hint=f"Known keys: {', '.join(DEFAULTS)}.",
            )
        )
    for name in DEFAULTS:
        if name in user and not _type_ok(name, user[name]):
            problems.append(
                Problem(
                    "durabl.E002",
                    f"settings.{SETTING_NAME}['{name}'] must be {EXPECTED[name]}, "
                    f"got {user[name]!r}.",
                )
            )
    return problems
