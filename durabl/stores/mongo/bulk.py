"""A batch of fenced writes sent as one unordered ``bulk_write``, and how its answers map
back to the batch.

:meth:`durabl.stores.mongo.MongoJobQueue.complete_many` builds a :class:`FencedBatch`: one
``UpdateOne`` per distinct (job, token) pair, filtered on ``_id``, ``claim_token`` and
``status: "active"`` like every single fenced write. Ids that do not parse never reach the
server; a completion repeated within the batch shares the first one's request (and answer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from pymongo import UpdateOne

from durabl.model.job import JobResult
from durabl.stores.base import Completion
from durabl.stores.mongo import codec


class MongomockUpdateOne(UpdateOne):
    """An ``UpdateOne`` that mongomock's bulk builder accepts.

    pymongo >= 4.11 hands the builder a ``sort=`` keyword that mongomock 4.3's
    ``add_update`` does not take (``TypeError``). Used on mongomock only; a server gets
    pymongo's own ``UpdateOne``.
    """

    __slots__ = ()

    def _add_to_bulk(self, bulkobj: Any) -> None:
        bulkobj.add_update(self._filter, self._doc, False, False)


def fenced_update(
    job_id: ObjectId, token: str, update: Mapping[str, Any], *, mongomock: bool
) -> UpdateOne:
    """The bulk request for one fenced write: it matches only the claim ``token`` holds."""
    fence = {"_id": job_id, "claim_token": token, "status": "active"}
    return (MongomockUpdateOne if mongomock else UpdateOne)(fence, update)


@dataclass(frozen=True)
class FencedBatch:
    """The requests of one ``bulk_write`` and, per input, which request answers it."""

    requests: list[UpdateOne]
    #: (job id, token) of each request, in request order.
    fences: list[tuple[ObjectId, str]]
    #: Per input, in input order: the index of its request, or None for an id that does
    #: not parse (``not-found`` without a write).
    slots: list[int | None]

    @classmethod
    def of(
        cls,
        completions: Sequence[Completion],
        update: Callable[[Completion], Mapping[str, Any]],
        *,
        mongomock: bool,
    ) -> FencedBatch:
        """One request per distinct (job, token); ``update`` builds its update document."""
        requests: list[UpdateOne] = []
        fences: list[tuple[ObjectId, str]] = []
        slots: list[int | None] = []
        index: dict[tuple[ObjectId, str], int] = {}
        for completion in completions:
            oid = codec.parse_id(completion.job_id)
            if oid is None:
                slots.append(None)
                continue
            fence = (oid, completion.token)
            if fence not in index:
                index[fence] = len(requests)
                fences.append(fence)
                requests.append(
                    fenced_update(oid, completion.token, update(completion), mongomock=mongomock)
                )
            slots.append(index[fence])
        return cls(requests, fences, slots)

    def answers(self, per_request: Sequence[JobResult]) -> list[JobResult]:
        """One result per input, in input order, from one result per request."""
        if len(per_request) != len(self.requests):
            raise ValueError(f"{len(per_request)} results for {len(self.requests)} requests")
        return [JobResult("not-found") if s is None else per_request[s] for s in self.slots]
