"""The writes of a SQL store that follow a claim, written once for every dialect: each is
fenced on the claim token, runs in one transaction, and keeps a receipt per (token,
operation) so that a write repeated after an ambiguous failure reports its first result.

Dedupe rests on unique partial indexes over three slot columns (live, pending, active). A
run that goes back to pending moves its key from the active slot back to the pending
slot, unless a pending follower already holds that: the run is then superseded. How the
follower is noticed is the dialect's (``Statements.lock_claim``, :attr:`slot_conflict`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar

from durabl.model import rules
from durabl.model.attempts import ATTEMPTS_KEPT, AttemptOutcome
from durabl.model.job import (
    HeartbeatResult,
    JobResult,
    JournalAppendResult,
    JournalRecord,
    LogEntry,
    ResultStatus,
)
from durabl.model.options import RECEIPTS_KEPT
from durabl.model.reports import ReapReport
from durabl.model.rows import encode_journal
from durabl.stores.base import Completion, Failure, Release
from durabl.stores.engine import StoreBase
from durabl.stores.sql.statements import C, Statements

R = TypeVar("R")
#: A write's step inside its transaction: the result it applied, or None (fence missed).
Apply = Callable[[C, dict[str, Any]], ResultStatus | None]
#: Logs to store, per job: ``(job_id, entries)``.
LogBatches = Sequence[tuple[str, Sequence[LogEntry]]]

COMPLETED = JobResult("completed")


def ending(outcome: AttemptOutcome, error: str | None = None) -> dict[str, Any]:
    """The parameters of the history entry a terminal or back-to-pending write adds."""
    return {"outcome": outcome, "error": error, "kept": ATTEMPTS_KEPT}


#: The parameters every completion's statement takes besides the claim's and its result.
COMPLETION = {"status": "completed", **ending("completed")}


class SqlWrites(StoreBase, Generic[C]):
    """The fenced writes and the reaper of a SQL store, on the dialect's statements
    (:attr:`sql`) and the hooks below, which each dialect writes in its own terms."""

    #: The dialect's statements.
    sql: Statements
    #: The driver's errors for a statement a unique index refused, where the database then
    #: undoes that statement alone and the transaction carries on (SQLite). Empty where a
    #: unique violation aborts the whole transaction (PostgreSQL checks first instead).
    slot_conflict: tuple[type[Exception], ...] = ()

    # -- the dialect's hooks --------------------------------------------------------------
    @abstractmethod
    def _run(
        self,
        operation: str,
        fn: Callable[[C], R],
        *,
        write: bool = True,
        single: bool = False,
        repeatable: bool = True,
        timeout: float | None = None,
    ) -> R:
        """Run ``fn`` in one transaction (a read one unless ``write``), starting the store
        first if nobody has. ``single``: ``fn`` runs one statement, which needs no
        transaction of its own where statements commit alone; ``repeatable``: ``fn`` may
        run again after a lost connection (it may have committed); ``timeout`` bounds the
        whole operation, retries included."""

    @abstractmethod
    def _now_param(self) -> Any:
        """The instant a statement takes as ``now`` (None: the server's clock)."""

    @abstractmethod
    def _instant(self, value: datetime) -> Any:
        """``value`` as a statement's parameter."""

    @abstractmethod
    def _fence(self, job_id: str, token: str) -> dict[str, Any]:
        """The parameters of the fence of one claim."""

    @abstractmethod
    def _add_logs(self, tx: C, batches: LogBatches) -> None:
        """Append each job's log entries, dropping each job's oldest past the limit."""

    @abstractmethod
    def _complete(self, tx: C, completions: Sequence[Completion], now: Any) -> list[bool]:
        """Complete each job whose fence holds (keeping its result and its token as
        ``done_token``, which answers a repeat: no receipt row); whether each applied."""

    @abstractmethod
    def _reap_params(self, visibility_timeout: float, limit: int) -> dict[str, Any]:
        """The parameters of ``expired``, and ``now``."""

    # -- fenced writes --------------------------------------------------------------------
    def _fenced(
        self,
        op: str,
        job_id: str,
        token: str,
        logs: Sequence[LogEntry],
        apply: Apply[C],
        *,
        timeout: float | None = None,
    ) -> JobResult:
        """Run ``apply`` (None: the fence matched nothing) in one write transaction; when
        it applied, store the run's logs and the write's receipt in the same transaction;
        when it missed, resolve the miss. Repeatable: a repeat after a lost connection
        misses the fence and is answered from the receipt."""
        params = {**self._fence(job_id, token), "now": self._now_param()}

        def write(tx: C) -> JobResult:
            result = apply(tx, params)
            if result is None:
                return self._resolve_miss(tx, job_id, token, op)
            if logs:
                self._add_logs(tx, ((job_id, logs),))
            self._add_receipt(tx, job_id, token, op, result)
            return JobResult(result)

        return self._run(op, write, timeout=timeout)

    def _add_receipt(self, tx: C, job_id: str, token: str, op: str, result: str) -> None:
        """Remember what (token, op) did, keeping the newest RECEIPTS_KEPT per job (numbered
        in order: the fenced write before it holds the job's row, or SQLite's write lock)."""
        values = {"id": job_id, "token": token, "op": op, "result": result}
        n = int(tx.execute(self.sql.add_receipt, values).fetchone()["n"])
        if n > RECEIPTS_KEPT:
            tx.execute(self.sql.trim_receipts, {"id": job_id, "n": n - RECEIPTS_KEPT})

    def _resolve_miss(self, tx: C, job_id: str, token: str, op: str) -> JobResult:
        """Why a fenced write matched nothing: its own earlier result, a terminal job, a
        lost lease, or no job at all."""
        values = {"id": job_id, "token": token, "op": op}
        row = tx.execute(self.sql.resolve_miss, values).fetchone()
        if row is None:
            return rules.resolve_miss(None, None)
        if op == "complete" and row["status"] == "completed" and row["done_token"] == token:
            return rules.resolve_miss("completed", "completed")  # this completion, repeated
        return rules.resolve_miss(row["status"], row["receipt"])

    def heartbeat(
        self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()
    ) -> HeartbeatResult:
        """Renew the lease (one statement without logs). A beat that carries logs is not
        repeated after a dropped connection (its logs could be stored twice)."""
        params = {**self._fence(job_id, token), "now": self._now_param()}
        statement = self.sql.heartbeat

        def beat(tx: C) -> HeartbeatResult:
            row = tx.execute(statement, params).fetchone()
            if row is None:
                return "lease-lost"
            if logs:
                self._add_logs(tx, ((job_id, logs),))
            return "applied" if row["cancel_requested"] is None else "cancel-requested"

        return self._run("heartbeat", beat, single=not logs, repeatable=not logs)

    def write_completions(self, op: str, completions: Sequence[Completion]) -> list[JobResult]:
        """Every completion in one transaction (one statement where it is alone, without
        logs), each fenced on its own token; the logs of those that applied go with them."""
        now = self._now_param()
        with_logs = any(c.logs for c in completions)

        def write(tx: C) -> list[JobResult]:
            applied = self._complete(tx, completions, now)
            if with_logs:
                done = [
                    (c.job_id, c.logs)
                    for c, ok in zip(completions, applied, strict=True)
                    if ok and c.logs
                ]
                self._add_logs(tx, done)
            return [
                COMPLETED if ok else self._resolve_miss(tx, c.job_id, c.token, "complete")
                for c, ok in zip(completions, applied, strict=True)
            ]

        return self._run(op, write, single=not with_logs and len(completions) == 1)

    def write_failure(
        self, job_id: str, token: str, failure: Failure, logs: Sequence[LogEntry]
    ) -> JobResult:
        step = self._failed if failure.retry_at is None else self._retry_or_fail
        return self._fenced(
            failure.op, job_id, token, logs, lambda tx, params: step(tx, params, failure)
        )

    def _failed(self, tx: C, params: dict[str, Any], failure: Failure) -> ResultStatus | None:
        """End the claim ``failed``, with the failure's reason and kind."""
        done = self._terminal(
            tx,
            params,
            "failed",
            failure.terminal_outcome,
            error=failure.error,
            reason=failure.reason,
            kind=failure.kind,
        )
        return "failed-terminal" if done else None

    def _retry_or_fail(
        self, tx: C, params: dict[str, Any], failure: Failure
    ) -> ResultStatus | None:
        """Retry at ``failure.retry_at`` while attempts remain, else fail (:meth:`_failed`);
        the attempt count is read with the claim (locked where rows lock)."""
        row = tx.execute(self.sql.lock_claim, params).fetchone()
        if row is None:
            return None
        if row["cancel_requested"] is not None:  # not back to pending: it was cancelled
            return self._end_cancelled(tx, params, row["cancel_requested"])
        if row["attempts"] >= row["max_attempts"]:
            return self._failed(tx, params, failure)
        return self._back_to_pending(
            tx,
            params,
            row["followed"],
            "retry-scheduled",
            run_at=failure.retry_at,
            reason=failure.reason,
            outcome="retry-scheduled",
            error=failure.error,
        )

    def write_release(
        self, job_id: str, token: str, release: Release, logs: Sequence[LogEntry]
    ) -> JobResult:
        """Back to pending at its old ``run_at`` (or at ``release.run_at``), refunding the
        attempt. The timeout bounds the whole write, retries included."""

        def apply(tx: C, params: dict[str, Any]) -> ResultStatus | None:
            row = tx.execute(self.sql.lock_claim, params).fetchone()
            if row is None:
                return None
            if row["cancel_requested"] is not None:  # not back to pending: it was cancelled
                return self._end_cancelled(tx, params, row["cancel_requested"])
            return self._back_to_pending(
                tx,
                params,
                row["followed"],
                "released",
                refund=True,
                run_at=release.run_at,
                outcome=release.outcome,
            )

        return self._fenced("release", job_id, token, logs, apply, timeout=release.timeout)

    def write_cancelled_run(self, job_id: str, token: str, logs: Sequence[LogEntry]) -> JobResult:
        def apply(tx: C, params: dict[str, Any]) -> ResultStatus | None:
            row = tx.execute(self.sql.lock_claim, params).fetchone()
            if row is None:
                return None
            return self._end_cancelled(tx, params, row["cancel_requested"])

        return self._fenced("cancel", job_id, token, logs, apply)

    def _terminal(
        self,
        tx: C,
        params: dict[str, Any],
        status: str,
        outcome: AttemptOutcome,
        *,
        error: str | None = None,
        reason: str | None = None,
        kind: str | None = None,
    ) -> bool:
        """End the fenced claim in ``status`` (freeing every slot and the lease), the
        attempt ending as ``outcome``."""
        values = {**params, "status": status, "reason": reason, "kind": kind}
        return tx.execute(self.sql.terminal, {**values, **ending(outcome, error)}).rowcount > 0

    def _end_cancelled(
        self, tx: C, params: dict[str, Any], reason: str | None
    ) -> ResultStatus | None:
        """End the fenced claim as ``cancelled`` (``reason`` its fail reason and the
        attempt's error)."""
        reason = rules.cancelled_reason(reason)
        done = self._terminal(tx, params, "cancelled", "cancelled", error=reason, reason=reason)
        return "cancelled" if done else None

    def _back_to_pending(
        self,
        tx: C,
        params: dict[str, Any],
        followed: bool | None,
        result: ResultStatus,
        *,
        refund: bool = False,
        unstarted: bool = False,
        due_now: bool = False,
        run_at: datetime | None = None,
        reason: str | None = None,
        outcome: AttemptOutcome,
        error: str | None = None,
    ) -> ResultStatus | None:
        """Back to pending (``result``, the attempt ending as ``outcome``); ``superseded``
        when a follower holds the pending slot (``followed``, or the unique index refused
        the move); None when the fence does not hold."""
        if not followed:
            values = {
                **params,
                **ending(outcome, error),
                "refund": int(refund),
                "unstarted": int(unstarted),
                "due_now": due_now,
                "run_at": None if run_at is None else self._instant(run_at),
                "reason": reason,
            }
            try:
                moved = tx.execute(self.sql.to_pending, values).rowcount
            except self.slot_conflict:
                pass  # a follower took the pending slot: this statement alone was undone
            else:
                return result if moved else None
        done = self._terminal(tx, params, "superseded", "superseded", error=error, reason=reason)
        return "superseded" if done else None

    def append_journal(
        self, job_id: str, token: str, records: Sequence[JournalRecord], *, position: int
    ) -> JournalAppendResult:
        """One statement appends to the stored array when it holds ``position`` records;
        else the journal's length says whether this append already applied (only the claim
        holder appends, so records past ``position`` are this append's)."""
        params = self._fence(job_id, token)
        sql = self.sql

        def write(tx: C) -> JournalAppendResult:
            if records:
                journal = encode_journal([dict(r) for r in records])
                values = {**params, "journal": journal, "count": len(records)}
                if tx.execute(sql.append_journal, {**values, "position": position}).rowcount:
                    return "applied"
            row = tx.execute(sql.journal_len, params).fetchone()
            held = row is not None and row["journal_len"] >= position + len(records)
            return "applied" if held else "lease-lost"

        return self._run("append_journal", write)

    # -- recovery -------------------------------------------------------------------------
    def reap(self, visibility_timeout: float, *, limit: int = 1000) -> ReapReport:
        """Recover up to ``limit`` expired leases, oldest first, in one write transaction
        (PostgreSQL skips leases another reaper holds)."""
        params = self._reap_params(visibility_timeout + self.clock_skew_allowance, limit)

        def sweep(tx: C) -> ReapReport:
            stuck = tx.execute(self.sql.expired, params).fetchall()
            counts = {"recovered": 0, "stalled": 0, "superseded": 0}
            ids: list[str] = []
            for row in stuck:
                outcome = self._reap_one(tx, row, params["now"])
                if outcome is not None:
                    counts[outcome] += 1
                    ids.append(row["id"])
            return ReapReport(
                counts["recovered"],
                counts["stalled"],
                counts["superseded"],
                len(stuck) >= limit,
                tuple(ids),
            )

        return self._run("reap", sweep)

    def _reap_one(self, tx: C, row: Any, now: Any) -> str | None:
        """Recover one expired lease as :func:`rules.reap_decision` says: ``stalled``,
        ``recovered`` (pending again, or cancelled as requested), ``superseded`` or None."""
        params = {**self._fence(row["id"], row["claim_token"]), "now": now}
        decision = rules.reap_decision(
            row["attempts"],
            row["max_attempts"],
            reserved=bool(row["reserved"]),
            unstarted_reaps=row["unstarted_reaps"],
            cancel_requested=row["cancel_requested"] is not None,
        )
        if decision == "cancel":  # its worker is gone: cancelled now
            ended = self._end_cancelled(tx, params, row["cancel_requested"])
            return None if ended is None else "recovered"
        if decision == "stall":
            done = self._terminal(
                tx,
                params,
                "failed",
                "stalled",
                error=rules.STALLED_REASON,
                reason=rules.STALLED_REASON,
                kind="stalled",
            )
            return "stalled" if done else None
        refund = decision == "refund"
        moved = self._back_to_pending(
            tx,
            params,
            row["followed"],
            "released",
            refund=refund,
            unstarted=refund,
            due_now=True,
            outcome="lease-lost",
            error=rules.STALLED_REASON,
        )
        if moved is None:
            return None
        return "superseded" if moved == "superseded" else "recovered"
