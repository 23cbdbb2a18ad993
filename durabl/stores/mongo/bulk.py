"""A batch of fenced writes sent as one unordered ``bulk_write``, and how its answers map
back to the batch.

``complete_many`` builds a :class:`FencedBatch`: one update per distinct (job, token) pair,
fenced like every single write after a claim (:func:`~durabl.stores.mongo.codec.fence`).
Ids that do not parse never reach the server; a completion repeated within the batch
shares the first one's request (and answer).
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
        request: type[UpdateOne],
    ) -> FencedBatch:
        """One ``request`` per distinct (job, token); ``update`` builds its update."""
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
                requests.append(request(codec.fence(*fence), update(completion)))
            slots.append(index[fence])
        return cls(requests, fences, slots)

    def answers(self, per_request: Sequence[JobResult]) -> list[JobResult]:
        """One result per input, in input order, from one result per request."""
        if len(per_request) != len(self.requests):
            raise ValueError(f"{len(per_request)} results for {len(self.requests)} requests")
        return [JobResult("not-found") if s is None else per_request[s] for s in self.slots]
