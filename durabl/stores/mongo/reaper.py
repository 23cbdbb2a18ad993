"""MongoReaper: recovery of the jobs whose lease expired, for a MongoJobQueue."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import DuplicateKeyError

from durabl.model.job import ReapReport
from durabl.model.options import RECEIPTS_KEPT
from durabl.model.rules import STALLED_REASON, reap_decision
from durabl.stores.mongo import codec
from durabl.stores.mongo.attempts import (
    CLAIM_FIELDS,
    attempt_document,
    claim_info,
    push_attempt,
)
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
        recovered = stalled = superseded = 0
        ids: list[str] = []
        sweep = uuid.uuid4().hex  # this sweep's receipts
        for doc in stuck:
            outcome = self._reap_one(doc, cutoff, now, sweep)
            if outcome is None:
                continue
            ids.append(str(doc["_id"]))
            if outcome == "stalled":
                stalled += 1
            elif outcome == "superseded":
                superseded += 1
            else:
                recovered += 1
        return ReapReport(recovered, stalled, superseded, len(stuck) >= limit, tuple(ids))

    def _reap_one(
        self, doc: Mapping[str, Any], cutoff: datetime, now: datetime, sweep: str
    ) -> str | None:
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
        outcome = "recovered"
        claim = claim_info(doc)
        if decision == "cancel":  # its worker is gone: cancelled now
            update, _ = cancelled_update(now, doc["cancel_requested"], claim)
        elif decision == "stall":
            update = codec.terminal_update(
                "failed", now, failure_kind="stalled", fail_reason=STALLED_REASON
            )
            push_attempt(update, attempt_document(claim, now, "stalled", STALLED_REASON))
            outcome = "stalled"
        else:
            update = codec.back_to_pending(now, run_at=now)
            push_attempt(update, attempt_document(claim, now, "lease-lost", STALLED_REASON))
            if decision == "refund":
                update["$inc"] = {"attempts": -1, "unstarted_reaps": 1}

        def receipted(update: dict[str, Any], result: str) -> dict[str, Any]:
            entry = {"t": sweep, "op": "reap", "r": result}
            receipts = {"receipts": {"$each": [entry], "$slice": -RECEIPTS_KEPT}}
            return {**update, "$push": {**update.get("$push", {}), **receipts}}

        def mine() -> str | None:
            """A repeat that matched nothing: this sweep's own write if its receipt is
            there (its reply was lost), else someone else's (not counted)."""
            found = self.store.col.find_one(
                {"_id": doc["_id"], "receipts": {"$elemMatch": {"t": sweep, "op": "reap"}}},
                {"receipts": 1},
            )
            receipts = found.get("receipts", ()) if found else ()
            return next((r["r"] for r in receipts if r.get("t") == sweep), None)

        def write() -> str | None:
            try:
                res = self.store.col.update_one(query, receipted(update, outcome))
            except DuplicateKeyError:
                ended = attempt_document(claim, now, "superseded", STALLED_REASON)
                followed = push_attempt(codec.terminal_update("superseded", now), ended)
                superseded = receipted(followed, "superseded")
                res = self.store.col.update_one(query, superseded)
                return "superseded" if res.matched_count else mine()
            return outcome if res.matched_count else mine()

        return self.store.call("reap", write)
