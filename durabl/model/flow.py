"""Flow control rules, the same on every store: per-key concurrency limits and per-type
rate limits (validation and the window arithmetic). Pure: no I/O.

A store does only the atomic part: a claim skips a job whose key already has its limit of
active jobs, and counts the starts of a rate-limited type in the current window.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from durabl.model.clock import Seconds, to_seconds

MAX_CONCURRENCY_KEY_BYTES = 1024
MAX_CONCURRENCY_LIMIT = 2**31 - 1
MAX_RATE_LIMIT = 2**31 - 1
MIN_RATE_PERIOD = 0.001  # a millisecond: every store keeps instants in milliseconds
MAX_RATE_PERIOD = 366 * 24 * 3600.0
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _whole(value: object, name: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if not 1 <= value <= maximum:
        raise ValueError(f"{name} must be between 1 and {maximum}, got {value!r}")
    return value


def check_concurrency(key: object, limit: object) -> tuple[str | None, int | None]:
    """The checked ``(concurrency_key, concurrency_limit)`` of an enqueue: both None, or a
    non-empty key with a limit of at least 1 (a key alone means limit 1)."""
    if key is None:
        if limit is not None:
            raise ValueError("concurrency_limit needs a concurrency_key to count jobs under")
        return None, None
    if not isinstance(key, str):
        raise ValueError(f"concurrency_key must be a string, got {key!r}")
    if not key or key.isspace():
        raise ValueError(f"concurrency_key must be a non-empty string, got {key!r}")
    if "\x00" in key:
        raise ValueError(f"concurrency_key must not contain NUL characters, got {key[:40]!r}")
    if len(key.encode("utf-8", "replace")) > MAX_CONCURRENCY_KEY_BYTES:
        raise ValueError(f"concurrency_key must be at most {MAX_CONCURRENCY_KEY_BYTES} bytes")
    return key, 1 if limit is None else _whole(limit, "concurrency_limit", MAX_CONCURRENCY_LIMIT)


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` starts of a type in each window of ``per`` seconds; the windows
    are fixed and aligned to the Unix epoch (``[k * per, (k + 1) * per)``)."""

    limit: int
    per: float

    @classmethod
    def of(cls, limit: object, per: Seconds) -> RateLimit:
        """Checked: ``limit`` an int >= 1, ``per`` seconds (or a timedelta) between a
        millisecond and a year, in whole milliseconds."""
        count = _whole(limit, "limit", MAX_RATE_LIMIT)
        seconds = to_seconds(per, "per")
        if not MIN_RATE_PERIOD <= seconds <= MAX_RATE_PERIOD:
            raise ValueError(
                f"per must be between 0.001 and {MAX_RATE_PERIOD:g} seconds, got {per!r}"
            )
        millis = round(seconds * 1000)
        if not math.isclose(millis, seconds * 1000, abs_tol=1e-6):
            raise ValueError(f"per must be a whole number of milliseconds, got {per!r}")
        return cls(count, millis / 1000)

    @property
    def per_millis(self) -> int:
        return round(self.per * 1000)

    def window_of(self, now_millis: int) -> int:
        """The start of the window holding ``now_millis``, in epoch milliseconds."""
        return now_millis - now_millis % self.per_millis

    def window_start(self, now: datetime) -> datetime:
        """The start of the window holding ``now``."""
        millis = (now - _EPOCH) // timedelta(milliseconds=1)
        return _EPOCH + timedelta(milliseconds=self.window_of(millis))

    def window_end(self, now: datetime) -> datetime:
        """When the window holding ``now`` ends (the next one starts)."""
        return self.window_start(now) + timedelta(milliseconds=self.per_millis)

    def started_in(self, window_start: int, started: int, now_millis: int) -> int:
        """The starts counted in the window of ``now_millis``: ``started``, kept for the
        window beginning at ``window_start`` (epoch milliseconds), or 0 when that window
        has ended. A stored window later than ``now_millis``'s counts as full: another
        claim read a later clock and counted there first (this reading was taken before
        it waited for the row, or on a process clock that lags), and counting here would
        open the older window again and let its starts fall into the newer one."""
        window = self.window_of(now_millis)
        if window_start > window:
            return max(started, self.limit)
        return started if window_start == window else 0

    def allowance(self, started: int) -> int:
        """How many more may start in a window that has seen ``started`` starts."""
        return max(self.limit - started, 0)


def check_rate_limit(limit: object, per: Seconds | None) -> RateLimit | None:
    """``set_rate_limit``'s arguments checked: None (``limit=None`` removes the limit) or
    the :class:`RateLimit`."""
    if limit is None:
        return None
    if per is None:
        raise ValueError("a rate limit needs per= (the window, in seconds)")
    return RateLimit.of(limit, per)


#: How old (seconds) a process's list of rate-limited types may get before a claim reads it
#: again: a limit set by another process applies to this one's claims within this time.
RATE_LIMITS_REFRESH = 30.0


class LimitedTypes:
    """The types with a rate limit, as one store object knows them, so that a claim reads a
    type's window only when the type has a limit (claims of unlimited types cost nothing
    extra). The set is exact for this object's own ``set_rate_limit`` calls (:meth:`note`)
    and is replaced by the stored list (one read of every limited type) when it is older
    than ``refresh`` seconds on ``monotonic``: a limit another process sets applies here
    within ``refresh`` seconds. Thread-safe; a claim that finds the set due takes the
    refresh (:meth:`refresh_due`) so that concurrent claims read the list once."""

    def __init__(self, monotonic: Callable[[], float], refresh: float = RATE_LIMITS_REFRESH):
        self._monotonic = monotonic
        self._refresh = refresh
        self._lock = threading.Lock()
        self._types: frozenset[str] = frozenset()
        self._loaded_at: float | None = None  # never loaded: the first claim reads the list
        #: What :meth:`note` learnt since the refresh in flight began (a list read before
        #: this object's own write committed must not undo it).
        self._since: dict[str, bool] = {}

    def refresh_due(self) -> bool:
        """Whether the caller should read the stored list now and :meth:`replace` the set
        with it (then, or :meth:`failed`); True for one caller at a time."""
        with self._lock:
            now = self._monotonic()
            if self._loaded_at is not None and now - self._loaded_at < self._refresh:
                return False
            self._loaded_at = now
            self._since = {}
            return True

    def replace(self, types: Iterable[str]) -> None:
        """The stored list, just read."""
        with self._lock:
            stored = set(types)
            for type, limited in self._since.items():
                (stored.add if limited else stored.discard)(type)
            self._types = frozenset(stored)
            self._loaded_at = self._monotonic()

    def failed(self) -> None:
        """The read of the list failed: the next claim reads it again."""
        with self._lock:
            self._loaded_at = None

    def note(self, type: str, limited: bool) -> None:
        """This object stored (or removed) the limit of ``type``, or a claim found that the
        stored limit of ``type`` is gone."""
        with self._lock:
            self._types = self._types | {type} if limited else self._types - {type}
            self._since[type] = limited

    def __contains__(self, type: object) -> bool:
        return type in self._types

    def refresh(self, read_stored: Callable[[], Iterable[str]]) -> None:
        """Replace the set with the stored list, read through ``read_stored``, if it is due
        (an error leaves the refresh due)."""
        if self.refresh_due():
            try:
                self.replace(read_stored())
            except BaseException:
                self.failed()
                raise

    def has_limit(self, type: str, read_stored: Callable[[], Iterable[str]]) -> bool:
        """Whether a claim of ``type`` must read its window (refreshing the set first if it
        is due)."""
        self.refresh(read_stored)
        return type in self
