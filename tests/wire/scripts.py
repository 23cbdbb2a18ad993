"""Per store operation, the conversation it has with a primary, with one write left open.

A :class:`Script` starts the operation, answers whatever comes before its write (a read, an
earlier claim), and knows how a primary answers that write in each case a fault leads to:

- ``applied``: the server applies it now, or answers a driver's retry of the same
  (``lsid``, ``txnNumber``) from its record of one that already applied;
- ``resolve``: the driver gave up on a write that *did* apply; the store asks again (a new
  write, or a read), and the server answers from the state the write left;
- ``retried``: the driver gave up on a write that did *not* apply; the store's next step
  meets the state from before it.

``finish`` answers what follows the write when it went through; ``check`` asserts the
fault-free outcome, ``check_unapplied`` the outcome when the write never applied.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mockupdb import Request

from durabl.model.options import build_new_job
from durabl.model.reports import ReapReport
from durabl.stores.base import Completion
from tests.wire.server import (
    Call,
    Wire,
    claimed_by,
    duplicate_key,
    found,
    inserted,
    modified,
    new_token,
    receipt,
    txn,
    updated,
)


class Script:
    name = ""
    command = "update"
    #: Whether the store repeats the write itself once the driver gave up (tenacity).
    store_retries = True

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.store = wire.store
        self.sent: Request | None = None

    def start(self) -> Call:
        raise NotImplementedError

    def applied(self, request: Request) -> None:
        updated(request)

    def repeat(self, request: Request) -> None:
        """A new attempt at the write after the first applied."""
        raise NotImplementedError

    def resolve(self) -> None:
        again = self.wire.receives(self.command)
        assert txn(again) != txn(self.first), "the store's repeat is a new write"
        self.repeat(again)

    def retried(self) -> None:
        self.applied(self.wire.receives(self.command))

    def finish(self) -> None:
        pass

    def check(self, result: Any) -> None:
        raise NotImplementedError

    def check_unapplied(self, call: Call) -> None:
        self.check(call.result())

    def check_error(self, call: Call) -> BaseException | None:
        """The store's answer to an error it does not repeat: the error, or None where it
        returns what it already has (and checks that)."""
        try:
            call.result()
        except Exception as exc:
            return exc
        raise AssertionError("no error raised")

    @property
    def first(self) -> Request:
        assert self.sent is not None
        return self.sent

    def write(self) -> Request:
        """The write under test, as the store first sends it."""
        self.sent = self.wire.receives(self.command)
        return self.sent


# -- enqueue ------------------------------------------------------------------------------
class EnqueuePlain(Script):
    name = "enqueue"
    command = "insert"
    options: ClassVar[dict[str, Any]] = {}

    def start(self) -> Call:
        return self.wire.start(self.store.enqueue, build_new_job("email", {}, **self.options))

    @property
    def doc(self) -> dict[str, Any]:
        return dict(self.first.doc["documents"][0])

    def applied(self, request: Request) -> None:
        assert request.doc["documents"][0]["_id"] == self.doc["_id"], "the same document every time"
        inserted(request)

    def repeat(self, request: Request) -> None:
        # The first insert took the _id; the store reads it back and finds its own job.
        duplicate_key(request)
        lookup = self.wire.receives("find")
        assert lookup.doc["filter"] == {"_id": self.doc["_id"]}
        found(lookup, {"_id": self.doc["_id"]})

    def check(self, result: Any) -> None:
        assert result.job_id == str(self.doc["_id"])


class EnqueueDedupe(EnqueuePlain):
    name = "enqueue-dedupe"
    options: ClassVar[dict[str, Any]] = {"dedupe_key": "invoice-7"}

    def finish(self) -> None:
        found(self.wire.receives("find"))  # no live job under the other scope


class EnqueueCoalesce(Script):
    name = "enqueue-coalesce"
    command = "update"

    def start(self) -> Call:
        job = build_new_job("email", {"v": 2}, dedupe_key="digest", coalesce="latest")
        call = self.wire.start(self.store.enqueue, job)
        insert = self.wire.receives("insert")
        duplicate_key(insert, index="durabl_dedupe_live")
        # No job of its own _id: the slot is another job's, which this one coalesces into.
        lookup = self.wire.receives("find")
        assert lookup.doc["filter"] == {"_id": insert.doc["documents"][0]["_id"]}
        found(lookup)
        return call

    def repeat(self, request: Request) -> None:
        updated(request)  # the pending job still matches; $set of the same data

    def check(self, result: Any) -> None:
        assert (result.job_id, result.coalesced) == (None, True)


# -- claim --------------------------------------------------------------------------------
class ClaimOne(Script):
    name = "claim"
    command = "findAndModify"
    store_retries = False
    limit = 1

    def start(self) -> Call:
        self.docs = [self.wire.job() for _ in range(self.limit)]
        call = self.wire.start(self.store.claim, "email", limit=self.limit, lease_owner="w1")
        for doc in self.docs[:-1]:
            request = self.wire.receives("findAndModify")
            modified(request, claimed_by(request, doc))
        return call

    @property
    def token(self) -> str:
        token: str = self.first.doc["update"]["$set"]["claim_token"]
        return token

    def applied(self, request: Request) -> None:
        assert request.doc["update"]["$set"]["claim_token"] == self.token
        modified(request, claimed_by(request, self.docs[-1]))

    def resolve(self) -> None:
        # Not repeated (it could take a second job): the store looks its token up.
        lookup = self.wire.receives("find")
        assert lookup.doc["filter"]["claim_token"] == self.token
        found(lookup, claimed_by(self.first, self.docs[-1]))

    def retried(self) -> None:
        found(self.wire.receives("find"))

    def check(self, result: Any) -> None:
        assert [h.id for h in result] == [str(d["_id"]) for d in self.docs]
        assert result[-1].claim_token == self.token
        assert len({h.claim_token for h in result}) == len(result)

    def check_unapplied(self, call: Call) -> None:
        if self.limit == 1:
            super().check_error(call)
        else:  # the jobs already claimed are handed over
            assert [h.id for h in call.result()] == [str(d["_id"]) for d in self.docs[:-1]]

    def check_error(self, call: Call) -> BaseException | None:
        if self.limit == 1:
            return super().check_error(call)
        self.check_unapplied(call)
        return None


class ClaimBatch(ClaimOne):
    name = "claim-batch"
    limit = 2


# -- writes under a claim -----------------------------------------------------------------
class Fenced(Script):
    """A write fenced on the claim token, with a receipt the store reads on a miss."""

    op = ""
    result = ""
    after = ""  # the job's status once the write applied

    def __init__(self, wire: Wire) -> None:
        super().__init__(wire)
        self.token = new_token()
        self.doc = wire.job(token=self.token)
        self.job_id = str(self.doc["_id"])
        wire.claimed(self.token, self.doc)

    def applied(self, request: Request) -> None:
        assert request.doc["updates"][0]["q"]["claim_token"] == self.token
        updated(request)

    def repeat(self, request: Request) -> None:
        updated(request, 0)  # the job is no longer active under this claim
        lookup = self.wire.receives("find")
        found(lookup, receipt(self.doc, self.token, self.op, self.result, self.after))

    def check(self, result: Any) -> None:
        assert result == self.result


class Heartbeat(Fenced):
    name = "heartbeat"

    def start(self) -> Call:
        return self.wire.start(self.store.heartbeat, self.job_id, self.token)

    def repeat(self, request: Request) -> None:
        updated(request)  # still active under this claim: renewing again is harmless

    def check(self, result: Any) -> None:
        assert result == "applied"


class Complete(Fenced):
    name = "complete"
    op, result, after = "complete", "completed", "completed"

    def start(self) -> Call:
        return self.wire.start(self.store.complete, self.job_id, self.token)


class CompleteMany(Fenced):
    name = "complete-many"
    op, result, after = "complete", "completed", "completed"

    def __init__(self, wire: Wire) -> None:
        super().__init__(wire)
        self.others = [(new_token(), wire.job()) for _ in range(2)]
        for token, doc in self.others:
            doc.update(status="active", claim_token=token)
            wire.claimed(token, doc)

    def start(self) -> Call:
        batch = [Completion(self.job_id, self.token)]
        batch += [Completion(str(doc["_id"]), token) for token, doc in self.others]
        return self.wire.start(self.store.complete_many, batch)

    def applied(self, request: Request) -> None:
        assert len(request.doc["updates"]) == 3 and request.doc["ordered"] is False
        updated(request, 3)

    def repeat(self, request: Request) -> None:
        updated(request, 0)
        for token, doc in [(self.token, self.doc), *self.others]:
            found(
                self.wire.receives("find"),
                receipt(doc, token, "complete", "completed", "completed"),
            )

    def check(self, result: Any) -> None:
        assert result == ["completed"] * 3


class Fail(Fenced):
    name = "fail"
    op, result, after = "fail", "retry-scheduled", "pending"

    def start(self) -> Call:
        call = self.wire.start(
            self.store.fail, self.job_id, self.token, "boom", retry_at=self.doc["run_at"]
        )
        found(
            self.wire.receives("find"), {"_id": self.doc["_id"], "attempts": 1, "max_attempts": 3}
        )
        return call


class Release(Fenced):
    name = "release"
    op, result, after = "release", "released", "pending"

    def start(self) -> Call:
        return self.wire.start(self.store.release, self.job_id, self.token)


class Reap(Fenced):
    name = "reap"

    def start(self) -> Call:
        call = self.wire.start(self.store.reap, 60.0)
        found(self.wire.receives("find"), self.doc)
        return call

    def applied(self, request: Request) -> None:
        updated(request)

    def repeat(self, request: Request) -> None:
        updated(request, 0)  # pending again: nothing matches the expired lease any more
        follow = self.wire.receives("find")
        reap = request.doc["updates"][0]["u"]["$push"]["receipts"]["$each"][0]
        found(follow, {"_id": self.doc["_id"], "status": "pending", "receipts": [reap]})

    def check(self, result: Any) -> None:
        assert result == ReapReport(recovered=1, job_ids=(self.job_id,))

    def check_unapplied(self, call: Call) -> None:
        self.check(call.result())


SCRIPTS: list[type[Script]] = [
    EnqueuePlain,
    EnqueueDedupe,
    EnqueueCoalesce,
    ClaimOne,
    ClaimBatch,
    Heartbeat,
    Complete,
    CompleteMany,
    Fail,
    Release,
    Reap,
]
