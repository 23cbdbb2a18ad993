"""The attempt history on a MongoDB job document: the entry a fenced write pushes with its
outcome, and what a claim must remember for it.

An update document cannot read the fields it replaces without an aggregation pipeline
(which mongomock does not run), so the claim's number, owner and start come from the
claim itself: the backend remembers each claim it made (:class:`ClaimMemo`) and the write
that records its outcome takes them from there, pushing the entry in the same update. A
claim this process does not remember (made by another backend object) is read first.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from durabl.model.attempts import ATTEMPTS_KEPT, AttemptOutcome
from durabl.stores.mongo.codec import push_newest

#: The fields of a claimed job document that its history entry is made from.
CLAIM_FIELDS = {"attempts": 1, "lease_owner": 1, "claimed_at": 1}

#: What a claim's history entry needs: its attempt number, owner and start.
ClaimInfo = tuple[int, "str | None", "datetime | None"]


def claim_info(doc: Mapping[str, Any]) -> ClaimInfo:
    """The :data:`ClaimInfo` of a claimed job document."""
    return (int(doc.get("attempts") or 0), doc.get("lease_owner"), doc.get("claimed_at"))


class ClaimMemo:
    """The claims this backend made and has not recorded an outcome for, by token:
    bounded (the oldest forgotten first), thread-safe."""

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._claims: dict[str, ClaimInfo] = {}
        self._lock = threading.Lock()

    def remember(self, token: str, doc: Mapping[str, Any]) -> None:
        entry = claim_info(doc)
        with self._lock:
            if len(self._claims) >= self._limit:
                del self._claims[next(iter(self._claims))]
            self._claims[token] = entry

    def take(self, token: str) -> ClaimInfo | None:
        with self._lock:
            return self._claims.pop(token, None)


def push_attempt(
    update: dict[str, Any],
    claim: ClaimInfo | None,
    ended: datetime,
    outcome: AttemptOutcome,
    error: str | None = None,
) -> dict[str, Any]:
    """``update`` that also appends to the history the entry of ``claim`` ending ``ended``
    as ``outcome`` (nothing without a claim), keeping the newest ATTEMPTS_KEPT (keys as
    :func:`durabl.model.attempts.attempt_from_record` reads)."""
    if claim is not None:
        number, worker, started = claim
        entry = {"n": number, "w": worker, "s": started, "e": ended, "o": outcome, "x": error}
        push_newest(update, "attempt_history", [entry], ATTEMPTS_KEPT)
    return update
