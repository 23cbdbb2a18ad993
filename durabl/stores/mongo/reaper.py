"""MongoReaper: recovery of the jobs whose lease expired, for a MongoJobQueue."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import DuplicateKeyError

from durabl.model.reports import ReapReport
from durabl.model.rules import (
    STALLED_REASON,
    ReapOutcome,
    ReapTally,
    reap_decision,
    reap_outcome,
)
from durabl.stores.mongo import codec
from durabl.stores.mongo.attempts import CLAIM_FIELDS, claim_info, push_attempt
from durabl.stores.mongo.cancel import cancelled_update
from durabl.stores.mongo.store import MongoStore


class MongoReaper:
    """Reaps the collection of ``store``: each expired lease is recovered (pending again),
    cancelled as requested, stalled, or superseded by a pending follower, as
    :func:`reap_decision` says."""

    def __init__(self, store: MongoStore) -> None:
        self.store = store

    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> ReapReport:
        now = self.store.now()
        cutoff = now - timedelta(seconds=visibility_timeout + self.store.clock_skew_allowance)
        stuck = self.store.call(
            "reap",
            lambda: list(
                self.store.col.find(
                    {"status": "active", "heartbeat_at": {"$lt": cutoff}},
                    {
                        "claim_token": 1,
                        "attempts": 1,
                        "max_attempts": 1,
                        "type": 1,
                        "reserved": 1,
                        "unstarted_reaps": 1,
                        "cancel_requested": 1,
                        **CLAIM_FIELDS,
                    },
                )
                .sort("heartbeat_at", 1)
                .limit(limit)
            ),
        )
        tally = ReapTally()
        sweep = uuid.uuid4().hex  # this sweep's receipts
        for doc in stuck:
            tally.add(str(doc["_id"]), self._reap_one(doc, cutoff, now, sweep))
        return tally.report(saturated=len(stuck) >= limit)

    def _reap_one(
        self, doc: Mapping[str, Any], cutoff: datetime, now: datetime, sweep: str
    ) -> ReapOutcome | None:
        """Recover one expired lease (``doc``) as :func:`reap_decision` says; what became of
        it, or None when another process got there first. ``sweep`` is this sweep's token:
        its receipts tell a repeat after a lost reply that the write was its own."""
        query = {
            "_id": doc["_id"],
            "status": "active",
            "claim_token": doc.get("claim_token"),
            "heartbeat_at": {"$lt": cutoff},
        }
        decision = reap_decision(
            doc["attempts"],
            doc["max_attempts"],
            reserved=bool(doc.get("reserved")),
            unstarted_reaps=doc.get("unstarted_reaps", 0),
            cancel_requested=doc.get("cancel_requested") is not None,
        )
        outcome = reap_outcome(decision, superseded=False)
        claim = claim_info(doc)
        if decision == "cancel":  # its worker is gone: cancelled now
            update, _ = cancelled_update(now, doc["cancel_requested"], claim)
        elif decision == "stall":
            update = codec.terminal_update(
                "failed", now, failure_kind="stalled", fail_reason=STALLED_REASON
            )
            push_attempt(update, claim, now, "stalled", STALLED_REASON)
        else:
            update = codec.back_to_pending(now, run_at=now)
            push_attempt(update, claim, now, "lease-lost", STALLED_REASON)
            if decision == "refund":
                update["$inc"] = {"attempts": -1, "unstarted_reaps": 1}
        codec.push_receipt(update, sweep, "reap", outcome)

        def mine() -> ReapOutcome | None:
            """A repeat that matched nothing: this sweep's own write if its receipt is
            there (its reply was lost), else someone else's (not counted)."""
            found = self.store.col.find_one(
                {"_id": doc["_id"], "receipts": {"$elemMatch": {"t": sweep, "op": "reap"}}},
                {"receipts": 1},
            )
            result: ReapOutcome | None = codec.receipt_of(found, sweep, "reap")
            return result

        def write() -> ReapOutcome | None:
            try:
                res = self.store.col.update_one(query, update)
            except DuplicateKeyError:  # a pending follower holds the key: it covers the work
                followed = codec.terminal_update("superseded", now)
                push_attempt(followed, claim, now, "superseded", STALLED_REASON)
                superseded = reap_outcome(decision, superseded=True)
                codec.push_receipt(followed, sweep, "reap", superseded)
                res = self.store.col.update_one(query, followed)
                return superseded if res.matched_count else mine()
            return outcome if res.matched_count else mine()

        return self.store.call("reap", write)
