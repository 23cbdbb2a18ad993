"""MongoQueries: the operator side of a MongoJobQueue (lookups, listing, counts, retry,
delete, stats): nothing here runs under a caller's claim."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from durabl.model import activity
from durabl.model.clock import as_utc
from durabl.model.job import FAILURE_KINDS, STATUSES, Job, JobFilter
from durabl.model.reports import QueueStats
from durabl.model.rules import JobPage, lists_by_finish, stats_from_counts
from durabl.stores.mongo import cancel, codec
from durabl.stores.mongo.codec import SLOTS
from durabl.stores.mongo.store import NO_RECEIPTS, MongoStore

_HEX = re.compile("[0-9a-f]+")


class MongoQueries:
    """Queries and operations over the collection of ``store``."""

    def __init__(self, store: MongoStore) -> None:
        self.store = store

    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        query = {"type": type, "$or": [{slot: dedupe_key} for slot in SLOTS]}
        return (
            self.store.call("has_outstanding", lambda: self.store.col.find_one(query, {"_id": 1}))
            is not None
        )

    def get_job(self, job_id: str) -> Job[Any] | None:
        oid = codec.parse_id(job_id)
        if oid is None:
            return None
        doc = self.store.call("get_job", lambda: self.store.col.find_one({"_id": oid}, NO_RECEIPTS))
        return codec.to_job(doc) if doc else None

    def _list_query(self, filters: JobFilter) -> dict[str, Any]:
        query: dict[str, Any] = dict(filters.equal_fields())
        for _, column, op, value in filters.ranges():
            query.setdefault(column, {})["$gte" if op == ">=" else "$lt"] = value
        if filters.waiting:  # the candidates of the filter (see durabl.stores.waiting)
            query["journal.0"] = {"$exists": True}
        search = filters.search
        if search:
            terms: list[dict[str, Any]] = [
                {"dedupe_key": {"$regex": "^" + re.escape(search)}},
                {"fail_reason": {"$regex": re.escape(search)}},
            ]
            if len(search) <= 24 and _HEX.fullmatch(search):
                # An ObjectId's text starts with ``search`` exactly when the id lies
                # between the prefix padded with 0s and with fs.
                pad = 24 - len(search)
                low, high = ObjectId(search + "0" * pad), ObjectId(search + "f" * pad)
                terms.append({"_id": {"$gte": low, "$lte": high}})
            query["$or"] = terms
        return query

    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        limit, offset, order, newest = page.limit, page.offset, page.order, page.newest
        if order is not None:
            sort = [(order.field, -1 if order.descending else 1), ("_id", -1)]
        else:
            sort = self._default_sort(filters)
        if newest is not None:
            steps = self._walk(filters, newest)
            if order is not None:
                steps.append({"$sort": dict(sort)})
            steps.append({"$skip": offset})
            if limit:
                steps.append({"$limit": limit})
            # (No projection: mongomock refuses an exclusion ``$project``; the page's
            # receipts are read and dropped by the codec.) A sort of that many whole jobs
            # may pass the server's 100 MB for one stage in memory: it may spill to disk.
            return self.store.call(
                "list_jobs",
                lambda: [
                    codec.to_job(doc)
                    for doc in self.store.col.aggregate(steps, allowDiskUse=order is not None)
                ],
            )
        query = self._list_query(filters)

        def fetch() -> list[Job[Any]]:
            cursor = self.store.col.find(query, NO_RECEIPTS).sort(sort).skip(offset).limit(limit)
            return [codec.to_job(doc) for doc in cursor]

        return self.store.call("list_jobs", fetch)

    def count_matching(
        self, filters: JobFilter, *, at_most: int | None = None, newest: int | None = None
    ) -> int:
        if newest is not None:
            steps = self._walk(filters, newest)
            if at_most is not None:
                steps.append({"$limit": at_most})
            pipeline = [*steps, {"$count": "n"}]
            counted = self.store.call(
                "count_jobs", lambda: list(self.store.col.aggregate(pipeline))
            )
            return int(counted[0]["n"]) if counted else 0
        query = self._list_query(filters)
        limit: dict[str, Any] = {} if at_most is None else {"limit": at_most}
        return self.store.call("count_jobs", lambda: self.store.col.count_documents(query, **limit))

    @staticmethod
    def _default_sort(filters: JobFilter) -> list[tuple[str, int]]:
        """A list's own order (:func:`~durabl.model.rules.lists_by_finish`), which an
        index serves: ``durabl_status_finished_newest``, or the jobs' own key."""
        return [("finished_at", -1), ("_id", -1)] if lists_by_finish(filters) else [("_id", -1)]

    def _walk(self, filters: JobFilter, newest: int) -> list[dict[str, Any]]:
        """The first ``newest`` jobs of the list without its search, in its own order, then
        those the search matches."""
        listed = self._list_query(replace(filters, search=None))
        steps: list[dict[str, Any]] = [
            {"$match": listed},
            {"$sort": dict(self._default_sort(filters))},
            {"$limit": newest},
        ]
        if filters.search:
            steps.append({"$match": self._list_query(JobFilter(search=filters.search))})
        return steps

    def _write_one(
        self,
        operation: str,
        job_id: str,
        write: Callable[[ObjectId, datetime], bool],
        *,
        retry: bool = True,
    ) -> bool:
        """``write(oid, now)`` on the job ``job_id`` names, at the store's now, as one store
        call; False for an id that names no job here (not an ObjectId)."""
        oid = codec.parse_id(job_id)
        if oid is None:
            return False
        now = self.store.now()
        return bool(self.store.call(operation, lambda: write(oid, now), retry=retry))

    def retry(self, job_id: str) -> bool:
        # Not repeated: a retry that applied but lost its reply would report False.
        return self._write_one("retry", job_id, self._retry_one, retry=False)

    def _retry_one(self, oid: ObjectId, now: datetime) -> bool:
        doc = self.store.col.find_one(
            {"_id": oid, "status": "failed"}, {"dedupe_key": 1, "dedupe_scope": 1}
        )
        if doc is None:
            return False
        fields: dict[str, Any] = {
            "status": "pending",
            "attempts": 0,
            "run_at": now,
            "updated_at": now,
        }
        key = doc.get("dedupe_key")
        if key is not None:
            scope = doc.get("dedupe_scope") or "pending+active"
            others = [{slot: key} for slot in codec.other_scope_slots(scope)]
            if self.store.col.find_one({"$or": others}, {"_id": 1}) is not None:
                return False  # the key is live under the other scope
            fields[codec.pending_slot(scope)] = key
        try:
            res = self.store.col.update_one(
                {"_id": oid, "status": "failed"},
                {"$set": fields, "$unset": {"failure_kind": "", "finished_at": ""}},
            )
        except DuplicateKeyError:
            return False
        return res.modified_count == 1

    def retry_selected(self, filters: JobFilter) -> int:
        """Each selected job as :meth:`retry` would, oldest first. MongoDB has no
        transaction here: the ids are read in one query, then each is retried by the
        single-job rule (its dedupe-slot checks are per key), within this one call."""
        query = self._list_query(filters)

        def ids() -> list[Any]:
            return [d["_id"] for d in self.store.col.find(query, {"_id": 1}).sort("_id", 1)]

        return sum(self.retry(str(oid)) for oid in self.store.call("retry_matching", ids))

    def delete_selected(self, filters: JobFilter) -> int:
        query = {"$and": [self._list_query(filters), {"status": {"$ne": "active"}}]}
        return int(
            self.store.call(
                "delete_matching", lambda: self.store.col.delete_many(query).deleted_count
            )
        )

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        query, now = self._list_query(filters), self.store.now()
        return int(
            self.store.call(
                "cancel_matching",
                lambda: cancel.cancel_matching(self.store, query, reason, now),
                retry=False,
            )
        )

    def run_now(self, job_id: str) -> bool:
        return self._write_one("run_now", job_id, self._run_now_one)

    def _run_now_one(self, oid: ObjectId, now: datetime) -> bool:
        if self.store.col.update_one(*_due_now({"_id": oid}, now)).matched_count:
            return True
        return self.store.col.find_one({"_id": oid, "status": "pending"}, {"_id": 1}) is not None

    def run_now_selected(self, filters: JobFilter) -> int:
        query, now = self._list_query(filters), self.store.now()
        return int(
            self.store.call(
                "run_now_matching",
                lambda: self.store.col.update_many(*_due_now(query, now)).modified_count,
                retry=False,
            )
        )

    def delete_finished(self, older_than: float, statuses: tuple[str, ...]) -> int:
        """One ``delete_many`` on the (status, finished_at) index. No TTL index: which
        statuses and what age are the caller's, per call, and a TTL monitor would delete
        on the server's schedule, not at the reaper sweep that asked."""
        before = self.store.now() - timedelta(seconds=older_than)
        query = {"status": {"$in": list(statuses)}, "finished_at": {"$lt": before}}
        return int(
            self.store.call("prune", lambda: self.store.col.delete_many(query).deleted_count)
        )

    def delete(self, job_id: str) -> bool:
        return self._write_one("delete", job_id, self._delete_one)

    def _delete_one(self, oid: ObjectId, now: datetime) -> bool:
        return (
            self.store.col.delete_one({"_id": oid, "status": {"$ne": "active"}}).deleted_count == 1
        )

    def get_stats(self, type: str | None = None) -> QueueStats:
        now = self.store.now()
        base: dict[str, Any] = {} if type is None else {"type": type}

        def read() -> QueueStats:
            counts = {s: self.store.col.count_documents({**base, "status": s}) for s in STATUSES}
            failed = {**base, "status": "failed"}
            by_kind = {
                kind: self.store.col.count_documents({**failed, "failure_kind": kind})
                for kind in FAILURE_KINDS
            }
            oldest = self.store.col.find_one(
                {**base, "status": "pending", "run_at": {"$lte": now}},
                {"run_at": 1},
                sort=[("run_at", 1)],
            )
            return stats_from_counts(counts, by_kind, oldest["run_at"] if oldest else None, now)

        return self.store.call("get_stats", read)

    def job_types(self) -> list[str]:
        return sorted(self.store.call("job_types", lambda: self.store.col.distinct("type")))

    def stats_by_type(self) -> dict[str, QueueStats]:
        """Three aggregations: jobs per (type, status), failed ones per (type, kind), and
        each type's oldest due pending job."""
        now = self.store.now()

        def read() -> dict[str, QueueStats]:
            col = self.store.col
            counts: dict[str, dict[str, int]] = {}
            for row in col.aggregate(
                [{"$group": {"_id": {"t": "$type", "s": "$status"}, "n": {"$sum": 1}}}]
            ):
                counts.setdefault(row["_id"]["t"], {})[row["_id"]["s"]] = row["n"]
            kinds: dict[str, dict[str, int]] = {}
            for row in col.aggregate(
                [
                    {"$match": {"status": "failed"}},
                    {"$group": {"_id": {"t": "$type", "k": "$failure_kind"}, "n": {"$sum": 1}}},
                ]
            ):
                kinds.setdefault(row["_id"]["t"], {})[row["_id"]["k"]] = row["n"]
            due = {
                row["_id"]: row["oldest"]
                for row in col.aggregate(
                    [
                        {"$match": {"status": "pending", "run_at": {"$lte": now}}},
                        {"$group": {"_id": "$type", "oldest": {"$min": "$run_at"}}},
                    ]
                )
            }
            return {
                t: stats_from_counts(counts[t], kinds.get(t, {}), due.get(t), now)
                for t in sorted(counts)
            }

        return self.store.call("stats_by_type", read)

    def read_activity(
        self, window: activity.ActivityWindow, types: tuple[str, ...]
    ) -> activity.ActivityRead:
        """An aggregation for the counts (``durabl_status_finished``), a find of the
        earliest due pending jobs per type (``durabl_type_status``), and one of the
        active jobs claimed in the window and the finished ones spanning a bucket's end."""
        chosen = {"$in": list(types)}
        since, ends = window.since, window.ends
        counted = [
            {
                "$match": {
                    "status": {"$in": list(activity.COUNTED_STATUSES)},
                    "finished_at": {"$gte": since, "$lt": window.until},
                    "type": chosen,
                }
            },
            {
                "$group": {
                    "_id": {
                        "t": "$type",
                        "s": "$status",
                        "b": {
                            "$floor": {
                                "$divide": [{"$subtract": ["$finished_at", since]}, window.width_ms]
                            }
                        },
                    },
                    "n": {"$sum": 1},
                }
            },
        ]
        changed = {
            "type": chosen,
            "$or": [
                {"status": "active", "heartbeat_at": {"$gte": since}},
                {
                    "status": {"$in": list(activity.FINISHED_STATUSES)},
                    "finished_at": {"$gt": ends[0]},
                    # activity.spans_an_end, asked of the server
                    "$or": [{"run_at": {"$lte": end}, "finished_at": {"$gt": end}} for end in ends],
                },
            ],
        }

        def read() -> activity.ActivityRead:
            col = self.store.col
            counts = {
                (row["_id"]["t"], row["_id"]["s"], int(row["_id"]["b"])): row["n"]
                for row in col.aggregate(counted)
            }
            docs = list(col.find(changed, _CANDIDATE_FIELDS))
            for job_type in types:
                docs.extend(
                    col.find(
                        {"type": job_type, "status": "pending", "run_at": {"$lte": window.until}},
                        _CANDIDATE_FIELDS,
                        sort=[("run_at", 1), ("_id", -1)],
                        limit=activity.PENDING_SCAN,
                    )
                )
            return activity.ActivityRead(counts, tuple(_candidate(doc) for doc in docs))

        return self.store.call("read_activity", read)


_CANDIDATE_FIELDS = {
    "type": 1,
    "status": 1,
    "run_at": 1,
    "created_at": 1,
    "updated_at": 1,
    "heartbeat_at": 1,
    "attempt_history.s": 1,
}


def _candidate(doc: dict[str, Any]) -> activity.WaitCandidate:
    beat = doc.get("heartbeat_at")
    return activity.WaitCandidate(
        type=doc["type"],
        status=doc["status"],
        run_at=as_utc(doc["run_at"]),
        created_at=as_utc(doc["created_at"]),
        updated_at=as_utc(doc["updated_at"]),
        heartbeat_at=None if beat is None else as_utc(beat),
        starts=tuple(
            as_utc(a["s"]) for a in doc.get("attempt_history") or () if a.get("s") is not None
        ),
    )


def _due_now(query: dict[str, Any], now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter and update that make the delayed pending jobs of ``query`` due ``now``."""
    delayed = {"status": "pending", "run_at": {"$gt": now}}
    return {"$and": [query, delayed]}, {"$set": {"run_at": now, "updated_at": now}}
