"""SqlStore: the :class:`~durabl.stores.base.Backend` of a SQL database, written once for
SQLite and PostgreSQL. Each operation is one transaction of the dialect's named statements
(:class:`~durabl.stores.sql.statements.Statements`); a dialect subclasses it with its
connections, its schema, its value representation and the few steps that really differ
(the hooks, each saying where and why)."""

from __future__ import annotations

import json
import uuid
from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from durabl.model.exceptions import DedupeScopeConflictError
from durabl.model.flow import RateLimit
from durabl.model.job import CancelOutcome, Job, JobFilter, JobHandle, handle_for
from durabl.model.options import NewJob
from durabl.model.rules import enqueues_before_inline_run, holder_update
from durabl.model.workers import WorkerInfo
from durabl.stores.base import EnqueueResult, InlineClaimResult
from durabl.stores.sql import rates
from durabl.stores.sql.pauses import SqlPauses
from durabl.stores.sql.reads import SqlReads
from durabl.stores.sql.schedules import SqlSchedules
from durabl.stores.sql.signals import SqlSignals
from durabl.stores.sql.statements import C, selecting
from durabl.stores.sql.subscriptions import SqlSubscriptions

#: The order claimed rows are handed out in (a statement returns them in any order).
claim_order = itemgetter("priority", "run_at", "seq")


class SqlStore(SqlReads[C], SqlSubscriptions[C], SqlSignals[C], SqlPauses[C], SqlSchedules[C]):
    """Every operation of a SQL store but the dialect's own (its connections, schema, push
    pickup, and the hooks declared here, in :class:`~durabl.stores.sql.reads.SqlReads`
    and in :class:`~durabl.stores.sql.writes.SqlWrites`); event subscriptions are
    :class:`~durabl.stores.sql.subscriptions.SqlSubscriptions`', signals
    :class:`~durabl.stores.sql.signals.SqlSignals`', pauses
    :class:`~durabl.stores.sql.pauses.SqlPauses`', schedules
    :class:`~durabl.stores.sql.schedules.SqlSchedules`'."""

    supports_journal = True
    supports_schedules = True
    supports_workers = True

    # -- the dialect's hooks --------------------------------------------------------------
    @abstractmethod
    def _new_row(self, job: NewJob, now: Any) -> dict[str, Any]:
        """The parameters of ``insert_pending`` for ``job`` (its payload encoded here,
        outside any transaction), ``id``, ``data`` and ``now`` among them."""

    @abstractmethod
    def _job(self, row: Any) -> Job[Any]:
        """The job a row of the job's columns holds, with the logs it carries (if any)."""

    @abstractmethod
    def _claim_batch(
        self, tx: C, params: dict[str, Any], limit: int, starting: int | None
    ) -> list[JobHandle[Any]]:
        """Claim up to ``limit`` due jobs of ``params["type"]`` (with ``now`` and
        ``owner``), those past the first ``starting`` reserved."""

    # -- enqueue --------------------------------------------------------------------------
    def enqueue(self, job: NewJob) -> EnqueueResult:
        row = self._new_row(job, self._now_param())
        return self._run(
            "enqueue", lambda tx: self._enqueue_in(tx, job, row), single=job.dedupe_key is None
        )

    def _enqueue_in(self, tx: C, job: NewJob, row: dict[str, Any]) -> EnqueueResult:
        """Insert; on a taken slot, coalesce (see :meth:`_slot_taken`)."""
        sql = self.sql
        if job.dedupe_key is not None:
            self._check_scope(tx, job)
        if tx.execute(sql.insert_pending, row).rowcount:
            return EnqueueResult(row["id"])
        if sql.job_exists is not None and tx.execute(sql.job_exists, row).fetchone() is not None:
            return EnqueueResult(row["id"])  # this very insert, committed by an earlier attempt
        return self._slot_taken(tx, job, row)

    def _other_scope(self, tx: C, key: str, scope: str) -> Any:
        """The row of a job holding ``key`` under the scope other than ``scope``, after
        serialising with every other write of the key, so no racer slips in between."""
        sql = self.sql
        if sql.lock_key is not None:
            tx.execute(sql.lock_key, {"key": key})
        other = sql.scope_of_pending_or_active if scope == "pending+active" else sql.scope_of_live
        return tx.execute(other, {"key": key}).fetchone()

    def _check_scope(self, tx: C, job: NewJob) -> None:
        """Raise (the transaction then stores nothing) when the key is live under the other
        scope."""
        assert job.dedupe_key is not None
        other = self._other_scope(tx, job.dedupe_key, job.dedupe_scope)
        if other is not None:
            raise DedupeScopeConflictError(
                job.dedupe_key, job.dedupe_scope, other["dedupe_scope"] or "unknown"
            )

    def _slot_taken(self, tx: C, job: NewJob, row: dict[str, Any]) -> EnqueueResult:
        """The pending slot is held: update the pending holder of the same type as
        ``rules.holder_update`` says (coalesce, debounce), in one statement; never an
        active job."""
        update = holder_update(job)
        if update is None:
            return EnqueueResult(None)
        sql = self.sql
        statement = (
            sql.update_holder_live
            if job.dedupe_scope == "pending+active"
            else sql.update_holder_pending
        )
        values = {
            "data": row["data"] if update.replace_data else None,
            "push_to": row["run_at"] if update.push_to is not None else None,
            "within_ms": update.within_ms,
            "now": row["now"],
            "key": job.dedupe_key,
            "type": job.type,
        }
        held = tx.execute(statement, values).rowcount == 1
        pushed = update.push_to is not None
        return EnqueueResult(
            None, coalesced=held and update.replace_data, debounced=held and pushed
        )

    # -- bulk enqueue ---------------------------------------------------------------------
    def insert_many(self, jobs: Sequence[NewJob]) -> list[str | None]:
        rows = self._new_rows(jobs)
        keyed = any(job.dedupe_key is not None for job in jobs)
        return self._run(
            "enqueue_many", lambda tx: self._insert_many_in(tx, jobs, rows), single=not keyed
        )

    def _new_rows(self, jobs: Sequence[NewJob]) -> list[dict[str, Any]]:
        now = self._now_param()
        return [self._new_row(job, now) for job in jobs]

    def _insert_many_in(
        self, tx: C, jobs: Sequence[NewJob], rows: list[dict[str, Any]]
    ) -> list[str | None]:
        """The keys' scopes checked (their locks held first, where rows lock), then every
        row inserted: a conflict of scopes raises before any is."""
        sql = self.sql
        by_scope: dict[str, list[str]] = {"pending": [], "pending+active": []}
        for job in jobs:
            if job.dedupe_key is not None:
                by_scope[job.dedupe_scope].append(job.dedupe_key)
        if by_scope["pending"] or by_scope["pending+active"]:
            if sql.lock_keys is not None:
                keys = by_scope["pending"] + by_scope["pending+active"]
                tx.execute(sql.lock_keys, {"keys": self._key_list(keys)}).fetchall()
            params = {
                "pending_keys": self._key_list(by_scope["pending"]),
                "live_keys": self._key_list(by_scope["pending+active"]),
            }
            live = tx.execute(sql.scope_in_batch, params).fetchone()
            if live is not None:
                requested = "pending" if live["dedupe_scope"] != "pending" else "pending+active"
                raise DedupeScopeConflictError(
                    live["dedupe_key"], requested, live["dedupe_scope"] or "unknown"
                )
        return self._insert_rows(tx, rows)

    @abstractmethod
    def _key_list(self, keys: list[str]) -> Any:
        """``keys`` as the list parameter of ``lock_keys`` and ``scope_in_batch``."""

    @abstractmethod
    def _insert_rows(self, tx: C, rows: list[dict[str, Any]]) -> list[str | None]:
        """Insert every row (as ``insert_pending`` does one) in this transaction: the id
        of each, in order, None where a dedupe slot is taken."""

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        now = self._now_param()
        row = self._new_row(job, now)
        if enqueues_before_inline_run(job):
            claim = {"now": now, "owner": lease_owner, "limit": 1, "starting": 1, "type": job.type}

            def follow(tx: C) -> InlineClaimResult:
                # The pending slot decides: a pending follower already covers the work.
                enq = self._enqueue_in(tx, job, row)
                if enq.job_id is None:
                    return InlineClaimResult(None, None, enq.coalesced)
                handles = self._claim_in(tx, self.sql.claim_by_id, {**claim, "job_id": enq.job_id})
                if not handles:  # the key has an active run: the new job is its follower
                    return InlineClaimResult(None, enq.job_id)
                return InlineClaimResult(handles[0])

            return self._run("claim_or_enqueue", follow, repeatable=False)
        values = {**row, "token": uuid.uuid4().hex, "owner": lease_owner}

        def create(tx: C) -> InlineClaimResult:
            if job.dedupe_key is not None:
                self._check_scope(tx, job)
            made = tx.execute(self.sql.insert_active, values).fetchone()
            if made is None and self._type_paused(tx, job.type):
                # No inline run of a paused type: the job waits, pending, for the resume.
                enq = self._enqueue_in(tx, job, row)
                return InlineClaimResult(None, enq.job_id, enq.coalesced)
            if made is None:
                return InlineClaimResult(None, None, self._slot_taken(tx, job, row).coalesced)
            return InlineClaimResult(handle_for(self._job(made), values["token"], self))

        return self._run("claim_or_enqueue", create, repeatable=False)

    # -- claiming -------------------------------------------------------------------------
    def _claim_in(self, tx: C, statement: str, params: dict[str, Any]) -> list[JobHandle[Any]]:
        """Run a claim statement: the handles of the jobs it claimed, in claim order."""
        rows = tx.execute(statement, params).fetchall()
        if not rows:
            return []
        rows.sort(key=claim_order)
        jobs = self._jobs(tx, rows)
        return [
            handle_for(job, row["claim_token"], self) for job, row in zip(jobs, rows, strict=True)
        ]

    def _claim_within_rate(
        self, tx: C, params: dict[str, Any], limit: int, starting: int | None
    ) -> list[JobHandle[Any]]:
        """Claim as :meth:`_claim_batch` does, within the type's rate limit: its window read
        (and locked where rows lock), then at most what is left claimed and counted."""
        allowed = rates.allowance(tx, self.sql, params["type"], params["now"], lock=True)
        n = limit if allowed is None else min(limit, allowed.left)
        if not n:
            return []  # the window is full: nothing written until the next one
        handles = self._claim_batch(tx, params, n, starting)
        if allowed is not None and handles:
            rates.count(tx, self.sql, params["type"], allowed, len(handles))
        return handles

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        params = {
            "type": type,
            "key": dedupe_key,
            "now": self._now_param(),
            "owner": lease_owner,
            "limit": 1,
            "starting": 1,
        }
        statement = self.sql.claim_by_key
        handles = self._run(
            "claim_next_by_key",
            lambda tx: self._claim_in(tx, statement, params),
            single=True,
            repeatable=False,  # a claim that may have committed is the reaper's to give back
        )
        return handles[0] if handles else None

    # -- flow control ---------------------------------------------------------------------
    def write_rate_limit(self, type: str, rate: RateLimit | None) -> None:
        self._run("set_rate_limit", lambda tx: rates.write(tx, self.sql, type, rate), single=True)

    def read_rate_limit(self, type: str) -> RateLimit | None:
        now = self._now_param()
        return self._run(
            "get_rate_limit",
            lambda tx: rates.read(tx, self.sql, type, now),
            write=False,
            single=True,
        )

    # -- operations -----------------------------------------------------------------------
    def write_cancel(self, job_id: str, reason: str) -> CancelOutcome:
        params = {"id": job_id, "reason": reason, "now": self._now_param()}
        sql = self.sql

        def write(tx: C) -> CancelOutcome:
            if tx.execute(sql.cancel_pending, params).rowcount:
                return "cancelled"
            if tx.execute(sql.request_cancel, params).rowcount:
                return "requested"
            return "not-cancellable"

        return self._run("cancel", write)

    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        """Two statements (pending, then active) in one transaction."""
        where, params = self._where(filters)
        values = {**params, "reason": reason, "now": self._now_param()}
        pending = selecting(self.sql.cancel_pending_matching, where)
        active = selecting(self.sql.request_cancel_matching, where)

        def write(tx: C) -> int:
            return tx.execute(pending, values).rowcount + tx.execute(active, values).rowcount

        return self._run("cancel_matching", write, repeatable=False)

    def run_now(self, job_id: str) -> bool:
        params = {"id": job_id, "now": self._now_param()}
        sql = self.sql

        def write(tx: C) -> bool:
            if tx.execute(sql.run_now, params).rowcount:
                return True
            return tx.execute(sql.pending_exists, params).fetchone() is not None

        return self._run("run_now", write)

    def run_now_selected(self, filters: JobFilter) -> int:
        where, params = self._where(filters)
        values = {**params, "now": self._now_param()}
        statement = selecting(self.sql.run_now_matching, where)
        return self._run(
            "run_now_matching",
            lambda tx: tx.execute(statement, values).rowcount,
            single=True,
            repeatable=False,
        )

    def retry(self, job_id: str) -> bool:
        """failed -> pending, due now, attempts 0. False when the job is not failed or its
        key is live (under either scope)."""
        now = self._now_param()
        return self._run("retry", lambda tx: self._retry_in(tx, job_id, now), repeatable=False)

    def retry_selected(self, filters: JobFilter) -> int:
        """Each selected job as :meth:`retry` would, oldest first, in one transaction."""
        where, params = self._where(filters)
        now = self._now_param()
        select = selecting(self.sql.matching_ids, where)

        def write(tx: C) -> int:
            ids = [row["id"] for row in tx.execute(select, params).fetchall()]
            return sum(self._retry_in(tx, job_id, now) for job_id in ids)

        return self._run("retry_matching", write, repeatable=False)

    def _retry_in(self, tx: C, job_id: str, now: Any) -> bool:
        """failed -> pending with attempts 0, due ``now``, taking its key back; False when
        the job is not failed or its key is live (under either scope)."""
        sql = self.sql
        row = tx.execute(sql.failed_for_retry, {"id": job_id}).fetchone()
        if row is None:
            return False
        key, slot = row["dedupe_key"], None
        if key is not None:
            scope = row["dedupe_scope"] or "pending+active"
            if self._other_scope(tx, key, scope) is not None:
                return False
            slot = "live" if scope == "pending+active" else "pending"
            held = sql.slot_held
            if held is not None and tx.execute(held, {"slot": slot, "key": key}).fetchone():
                return False
        values = {"id": job_id, "now": now, "key": key, "slot": slot}
        try:
            return tx.execute(sql.retry, values).rowcount == 1
        except self.slot_conflict:
            return False  # the key is live again under the same scope

    def delete(self, job_id: str) -> bool:
        statement = self.sql.delete
        return self._run(
            "delete",
            lambda tx: tx.execute(statement, {"id": job_id}).rowcount == 1,
            single=True,
            repeatable=False,
        )

    def delete_selected(self, filters: JobFilter) -> int:
        where, params = self._where(filters)
        statement = selecting(self.sql.delete_matching, where)
        return self._run(
            "delete_matching",
            lambda tx: tx.execute(statement, params).rowcount,
            single=True,
            repeatable=False,
        )

    # -- reads ----------------------------------------------------------------------------
    def has_outstanding(self, type: str, dedupe_key: str) -> bool:
        params, statement = {"type": type, "key": dedupe_key}, self.sql.has_outstanding
        return self._run(
            "has_outstanding",
            lambda tx: tx.execute(statement, params).fetchone() is not None,
            write=False,
            single=True,
        )

    # -- the workers registry -------------------------------------------------------------
    def upsert_worker(self, info: WorkerInfo) -> None:
        values = {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "concurrency": json.dumps(info.concurrency, sort_keys=True),
            "started_at": self._instant(info.started_at),
            "last_seen": self._instant(info.last_seen),
            "active": info.active,
            "heartbeat_interval": info.heartbeat_interval,
        }
        statement = self.sql.upsert_worker
        self._run("upsert_worker", lambda tx: tx.execute(statement, values), single=True)

    def load_workers(self) -> list[WorkerInfo]:
        rows = self._run(
            "load_workers",
            lambda tx: tx.execute(self.sql.load_workers, {}).fetchall(),
            write=False,
            single=True,
        )
        return [self._worker(row) for row in rows]

    def _worker(self, row: Any) -> WorkerInfo:
        concurrency = row["concurrency"]  # JSON text, or already parsed (jsonb)
        if isinstance(concurrency, str):
            concurrency = json.loads(concurrency)
        return WorkerInfo(
            id=row["id"],
            host=row["host"],
            pid=int(row["pid"]),
            concurrency={str(k): int(v) for k, v in concurrency.items()},
            started_at=self._from_instant(row["started_at"]),
            last_seen=self._from_instant(row["last_seen"]),
            active=int(row["active"]),
            heartbeat_interval=float(row["heartbeat_interval"]),
        )

    def delete_worker(self, worker_id: str) -> bool:
        statement = self.sql.delete_worker
        return self._run(
            "delete_worker",
            lambda tx: tx.execute(statement, {"id": worker_id}).rowcount == 1,
            single=True,
        )

    def prune_workers(self, last_seen_before: datetime) -> int:
        values, statement = {"before": self._instant(last_seen_before)}, self.sql.prune_workers
        return self._run(
            "prune_workers", lambda tx: tx.execute(statement, values).rowcount, single=True
        )
