"""Flow control on MongoDB (:mod:`durabl.model.flow`; docs/flow-control.md).

Concurrency keys: an active job with a key holds one of its key's ``limit`` slots, the
string ``"<n>:<key>"`` in ``concurrency_slot``, which a unique partial index over active
jobs makes exclusive (a job leaving ``active`` drops it). A claim leaves the jobs of a
full key out of its query (:class:`KeyUsage`: one aggregate, once the store object has met
a keyed job); a claimed job with a key then takes a free slot before its handle is handed
out, and is handed back at once, inside the same claim, when none is left or its own
limit is reached (jobs of a higher limit may hold other slots).

Rate limits: one document per limited type in ``<collection>_rate_limits``, with the
claims counted in its current window. A claim of a limited type reads it (a full window:
nothing written), claims at most what is left, then counts its claims by compare-and-set;
a claimer that lost the race to a full window hands back the claims over the limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError

from durabl.model.flow import RateLimit
from durabl.model.payload import to_millis
from durabl.stores.mongo.codec import CONCURRENCY_SLOT, back_to_pending, fence

KEY = "concurrency_key"
LIMIT = "concurrency_limit"
SLOT = CONCURRENCY_SLOT
_CAS_TRIES = 8


def slot_index_options() -> dict[str, Any]:
    """The unique partial index on the slot of active jobs."""
    return {
        "unique": True,
        "partialFilterExpression": {"status": "active", SLOT: {"$exists": True}},
    }


@dataclass
class KeyUsage:
    """The active jobs of each key, as one claim sees and updates them."""

    active: dict[str, int] = field(default_factory=dict)
    slots: dict[str, set[int]] = field(default_factory=dict)
    #: Whether the counts were read (a store object that has met no keyed job skips it).
    counted: bool = False

    @classmethod
    def read(cls, col: Collection[dict[str, Any]]) -> KeyUsage:
        usage = cls(counted=True)
        rows = col.aggregate(
            [
                {"$match": {"status": "active", KEY: {"$exists": True}}},
                {"$group": {"_id": f"${KEY}", "n": {"$sum": 1}, "slots": {"$push": f"${SLOT}"}}},
            ]
        )
        for row in rows:
            usage.active[row["_id"]] = row["n"]
            usage.slots[row["_id"]] = {
                int(s.split(":", 1)[0]) for s in row["slots"] if isinstance(s, str)
            }
        return usage

    def recount(self, col: Collection[dict[str, Any]], claimed_key: str) -> None:
        """Read the counts now, inside a claim that took a job of ``claimed_key`` without
        them (the first keyed job a store object meets): that job is not counted."""
        fresh = KeyUsage.read(col)
        fresh.active[claimed_key] = max(fresh.active.get(claimed_key, 1) - 1, 0)
        self.active, self.slots, self.counted = fresh.active, fresh.slots, True

    def held_back(self) -> list[dict[str, Any]]:
        """Query clauses for the jobs whose key has no room (``$nor`` them)."""
        return [{KEY: key, LIMIT: {"$lte": n}} for key, n in self.active.items()]


def with_room(query: Mapping[str, Any], usage: KeyUsage) -> dict[str, Any]:
    """``query`` without the jobs of a full key."""
    held = usage.held_back()
    return {**query, "$nor": held} if held else dict(query)


def take_slot(
    col: Collection[dict[str, Any]], doc: Mapping[str, Any], token: str, usage: KeyUsage
) -> bool:
    """Give the just-claimed ``doc`` (claim ``token``) a free slot of its key; False when
    every slot is held (the caller hands the job back)."""
    key, limit = doc[KEY], int(doc.get(LIMIT) or 1)
    if not usage.counted:
        usage.recount(col, key)
    usage.active[key] = usage.active.get(key, 0)  # the claim itself is not counted yet
    if usage.active[key] >= limit:
        # Its own slot may be free while jobs of a higher limit hold others: it waits.
        return False
    for n in range(limit):
        if n in usage.slots.get(key, set()):
            continue
        try:
            done = col.update_one(fence(doc["_id"], token), {"$set": {SLOT: f"{n}:{key}"}})
        except DuplicateKeyError:
            usage.slots.setdefault(key, set()).add(n)
            continue
        if done.matched_count:
            usage.slots.setdefault(key, set()).add(n)
            usage.active[key] += 1
            return True
        return False
    usage.active[key] = max(usage.active[key], limit)  # full: left out from now on
    return False


def unclaim(col: Collection[dict[str, Any]], job_id: Any, token: str, now: datetime) -> None:
    """Undo a claim whose handle was never handed out (its key or window had no room):
    pending again, its attempt given back, its dedupe slot moved back. A cancellation
    requested meanwhile stays requested: the next claim's heartbeat reports it."""
    update = back_to_pending(now)
    update["$inc"] = {"attempts": -1}
    del update["$unset"]["cancel_requested"]
    col.update_one(fence(job_id, token), update)


# -- rate limits ----------------------------------------------------------------------------
def write_rate(rates: Collection[dict[str, Any]], type: str, rate: RateLimit | None) -> None:
    if rate is None:
        rates.delete_one({"_id": type})
        return
    rates.update_one(
        {"_id": type},
        {
            "$set": {"max_starts": rate.limit, "per_ms": rate.per_millis},
            "$setOnInsert": {"window_start": 0, "started": 0},
        },
        upsert=True,
    )


def limited_types(rates: Collection[dict[str, Any]]) -> list[str]:
    """Every type with a stored limit (one read, of the ids only)."""
    return [doc["_id"] for doc in rates.find({}, {"_id": 1})]


def read_rate(rates: Collection[dict[str, Any]], type: str) -> RateLimit | None:
    doc = rates.find_one({"_id": type})
    return None if doc is None else _rate(doc)


def _rate(doc: Mapping[str, Any]) -> RateLimit:
    return RateLimit(doc["max_starts"], doc["per_ms"] / 1000)


def _window(doc: Mapping[str, Any], now: datetime) -> tuple[RateLimit, int, int]:
    """The limit ``doc`` stores, the window of ``now``, and the starts counted in it."""
    rate = _rate(doc)
    now_millis = int(to_millis(now).timestamp() * 1000)
    started = rate.started_in(doc["window_start"], doc["started"], now_millis)
    return rate, rate.window_of(now_millis), started


def allowance(
    rates: Collection[dict[str, Any]], type: str, now: datetime
) -> tuple[RateLimit, int] | None:
    """The type's limit and how many more may start in the window of ``now``."""
    doc = rates.find_one({"_id": type})
    if doc is None:
        return None
    rate, _, started = _window(doc, now)
    return rate, rate.allowance(started)


def count_starts(rates: Collection[dict[str, Any]], type: str, now: datetime, n: int) -> int:
    """Count ``n`` claims in the window of ``now`` by compare-and-set; how many of them fit
    (the caller hands back the rest)."""
    for _ in range(_CAS_TRIES):
        doc = rates.find_one({"_id": type})
        if doc is None:
            return n  # the limit was removed meanwhile
        rate, window, started = _window(doc, now)
        fits = min(n, rate.allowance(started))
        if not fits:
            return 0
        done = rates.update_one(
            {"_id": type, "window_start": doc["window_start"], "started": doc["started"]},
            {"$set": {"window_start": window, "started": started + fits}},
        )
        if done.matched_count:
            return fits
    return 0
