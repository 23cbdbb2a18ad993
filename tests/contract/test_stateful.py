"""Random sequences of every backend operation, with the store's invariants checked after
each step: dedupe exclusion per scope, one scope per key, no job lost, attempts bounded,
and every lifecycle result the one the claim tokens (and receipts) call for.

The same machine runs over mongomock, the in-memory backend and SQLite, on a fake clock.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from durabl import DedupeScopeConflictError
from durabl.model.job import Job, JobHandle, JobResult
from durabl.model.options import build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.conftest import cleanup_backend, make_backend

VT = 30.0
TYPES = ("a", "b")
KEYS = ("k1", "k2", "k3", None)
SCOPES = ("pending+active", "pending")
TERMINAL = ("completed", "failed", "superseded")

# What a write with the current claim token may return, per operation.
CURRENT_RESULTS = {
    "complete": {"completed"},
    "fail": {"retry-scheduled", "failed-terminal", "superseded"},
    "fail-fatal": {"failed-terminal"},
    "release": {"released", "superseded"},
}

ENQUEUE_ARGS: dict[str, st.SearchStrategy[Any]] = {
    "type": st.sampled_from(TYPES),
    "key": st.sampled_from(KEYS),
    "scope": st.sampled_from(SCOPES),
    "coalesce": st.booleans(),
    "max_attempts": st.integers(1, 3),
    "priority": st.integers(-1, 1),
    "delay": st.sampled_from([0, 0, 0, 10]),
    "n": st.integers(0, 9),
}

# 100 examples x 30 steps take ~3 s in memory, ~7 s on mongomock, ~11 s on SQLite, and find
# a seeded scope bug (retry without the cross-scope check) in most runs, where 40 missed it
# in most. Keep the step count below 2 x RECEIPTS_KEPT (16): the model assumes every receipt
# of a job is still kept.
SETTINGS = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class BackendMachine(RuleBasedStateMachine):
    """Drives one store; subclasses name which."""

    kind = ""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.backend: Backend = make_backend(self.kind, self.clock)
        self.backend.startup()
        self.accepted: dict[str, int] = {}  # job id -> the max_attempts it was given
        self.handles: list[JobHandle[Any]] = []  # every handle ever claimed, stale ones too
        self.current: dict[str, str] = {}  # job id -> the token that holds its claim
        self.receipts: dict[tuple[str, str], JobResult] = {}  # (token, op) -> first result

    def teardown(self) -> None:
        cleanup_backend(self.backend)

    # -- reading the store ----------------------------------------------------------------
    def jobs(self) -> list[Job[Any]]:
        return self.backend.list_jobs(limit=10_000)

    def job(self, job_id: str) -> Job[Any]:
        job = self.backend.get_job(job_id)
        assert job is not None, f"job {job_id} was lost"
        return job

    # -- rules ----------------------------------------------------------------------------
    # Hypothesis picks rules uniformly: two entry points each for enqueue and claim make
    # keys collide and jobs reach every status within a short run.
    @rule(**ENQUEUE_ARGS)
    def enqueue(self, **args: Any) -> None:
        self.do_enqueue(**args)

    @rule(**ENQUEUE_ARGS)
    def enqueue_more(self, **args: Any) -> None:
        self.do_enqueue(**args)

    def do_enqueue(
        self,
        type: str,
        key: str | None,
        scope: str,
        coalesce: bool,
        max_attempts: int,
        priority: int,
        delay: int,
        n: int,
    ) -> None:
        new = build_new_job(
            type,
            {"n": n},
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
            dedupe_key=key,
            dedupe_scope=scope,
            coalesce="latest" if coalesce and key is not None else None,
            now=self.backend.now(),
        )
        count_before = self.backend.count_jobs()
        try:
            result = self.backend.enqueue(new)
        except DedupeScopeConflictError as exc:
            assert key is not None
            assert (exc.dedupe_key, exc.requested_scope) == (key, scope)
            assert self.backend.count_jobs() == count_before
            return
        if result.job_id is None:
            assert key is not None, "a job without a dedupe key was refused"
            assert self.backend.count_jobs() == count_before
            return
        assert result.job_id not in self.accepted
        assert not result.coalesced
        self.accepted[result.job_id] = max_attempts
        job = self.job(result.job_id)
        assert (job.status, job.attempts, job.data) == ("pending", 0, {"n": n})

    @rule(**ENQUEUE_ARGS)
    def claim_or_enqueue(
        self,
        type: str,
        key: str | None,
        scope: str,
        coalesce: bool,
        max_attempts: int,
        priority: int,
        delay: int,
        n: int,
    ) -> None:
        new = build_new_job(
            type,
            {"n": n},
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
            dedupe_key=key,
            dedupe_scope=scope,
            coalesce="latest" if coalesce and key is not None else None,
            now=self.backend.now(),
        )
        count_before = self.backend.count_jobs()
        try:
            result = self.backend.claim_or_enqueue(new, "inline")
        except DedupeScopeConflictError:
            assert key is not None
            assert self.backend.count_jobs() == count_before
            return
        if result.handle is not None:
            handle = result.handle
            assert result.enqueued_id is None
            assert (handle.status, handle.attempts, handle.data) == ("active", 1, {"n": n})
            self.accepted[handle.id] = max_attempts
            self.track_claims([handle])
        elif result.enqueued_id is not None:
            assert (key, scope) != (None, "pending+active")
            self.accepted[result.enqueued_id] = max_attempts
            assert self.job(result.enqueued_id).status == "pending"
        else:
            assert key is not None, "a job without a dedupe key was neither claimed nor stored"
            assert self.backend.count_jobs() == count_before

    @rule(type=st.sampled_from(TYPES), key=st.sampled_from(KEYS[:-1]))
    def claim_next_by_key(self, type: str, key: str) -> None:
        handle = self.backend.claim_next_by_key(type, key, lease_owner="drain")
        if handle is not None:
            assert handle.dedupe_key == key
            self.track_claims([handle])

    @rule(type=st.sampled_from(TYPES), limit=st.integers(1, 3))
    def claim(self, type: str, limit: int) -> None:
        self.do_claim(type, limit)

    @rule(type=st.sampled_from(TYPES), limit=st.integers(1, 3))
    def claim_more(self, type: str, limit: int) -> None:
        self.do_claim(type, limit)

    def do_claim(self, type: str, limit: int) -> None:
        handles = self.backend.claim(type, limit=limit, lease_owner="machine")
        assert len(handles) <= limit
        assert len({h.id for h in handles}) == len(handles)
        assert all(h.type == type and h.run_at <= self.clock.now() for h in handles)
        self.track_claims(handles)

    def track_claims(self, handles: list[JobHandle[Any]]) -> None:
        for handle in handles:
            assert handle.id in self.accepted
            assert handle.id not in self.current, "claimed a job that was already active"
            assert handle.status == "active"
            assert 1 <= handle.attempts <= handle.max_attempts
            assert handle.claim_token not in {h.claim_token for h in self.handles}
            self.current[handle.id] = handle.claim_token
            self.handles.append(handle)

    def write(self, index: int, op: str) -> None:
        handle = self.handles[index % len(self.handles)]
        before = self.job(handle.id)
        is_current = self.current.get(handle.id) == handle.claim_token
        if op == "complete":
            result = handle.complete()
        elif op == "fail":
            result = handle.fail("boom", retry_at=self.clock.now() + timedelta(seconds=index % 5))
        elif op == "fail-fatal":
            result = handle.fail_fatal("poison")
        else:
            result = handle.release()
        after = self.job(handle.id)
        if is_current:
            assert result.status in CURRENT_RESULTS[op], (op, result)
            self.receipts[(handle.claim_token, op)] = result
            del self.current[handle.id]
            expected_status = {
                "completed": "completed",
                "failed-terminal": "failed",
                "superseded": "superseded",
                "retry-scheduled": "pending",
                "released": "pending",
            }[result.status]
            assert after.status == expected_status
            if result.status == "released":
                assert after.attempts == before.attempts - 1
            else:
                assert after.attempts == before.attempts
            return
        receipt = self.receipts.get((handle.claim_token, op))
        if receipt is not None:
            assert result == receipt, (op, result, receipt)
        elif before.status in TERMINAL:
            assert result == JobResult("already-terminal", before.status), (op, result)
        else:
            assert result == JobResult("lease-lost"), (op, result, before.status)
        assert (after.status, after.attempts, after.updated_at) == (
            before.status,
            before.attempts,
            before.updated_at,
        ), "a stale write changed the job"

    @precondition(lambda self: self.handles)
    @rule(index=st.integers(0, 1000))
    def complete(self, index: int) -> None:
        self.write(index, "complete")

    @precondition(lambda self: self.handles)
    @rule(index=st.integers(0, 1000))
    def fail(self, index: int) -> None:
        self.write(index, "fail")

    @precondition(lambda self: self.handles)
    @rule(index=st.integers(0, 1000))
    def fail_fatal(self, index: int) -> None:
        self.write(index, "fail-fatal")

    @precondition(lambda self: self.handles)
    @rule(index=st.integers(0, 1000))
    def release(self, index: int) -> None:
        self.write(index, "release")

    @precondition(lambda self: self.handles)
    @rule(index=st.integers(0, 1000))
    def heartbeat(self, index: int) -> None:
        handle = self.handles[index % len(self.handles)]
        is_current = self.current.get(handle.id) == handle.claim_token
        assert handle.heartbeat() == ("applied" if is_current else "lease-lost")

    @rule(seconds=st.sampled_from([0.5, 5.0, 20.0, 45.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def reap(self) -> None:
        report = self.backend.reap(VT)
        assert report.handled == len(report.job_ids)
        for job_id in report.job_ids:
            assert job_id in self.current, "reaped a job that was not active"
            del self.current[job_id]
            assert self.job(job_id).status != "active"

    @rule(index=st.integers(0, 1000))
    def retry(self, index: int) -> None:
        failed = self.backend.list_jobs(status="failed", limit=10_000)
        if not failed:
            assert self.backend.retry("nope") is False
            return
        job = failed[index % len(failed)]
        if self.backend.retry(job.id):
            after = self.job(job.id)
            assert (after.status, after.attempts, after.failure_kind) == ("pending", 0, None)
        else:
            assert self.job(job.id).status == "failed"
            assert job.dedupe_key is not None, "retry refused a failed job without a key"

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def dedupe_exclusion_holds(self) -> None:
        live = [j for j in self.jobs() if j.status in ("pending", "active")]
        by_key: dict[str, list[Job[Any]]] = {}
        for job in live:
            if job.dedupe_key is not None:
                by_key.setdefault(job.dedupe_key, []).append(job)
        for key, jobs in by_key.items():
            scopes = {j.dedupe_scope for j in jobs}
            assert len(scopes) == 1, f"key {key!r} is live under both scopes: {jobs}"
            statuses = Counter(j.status for j in jobs)
            if scopes == {"pending+active"}:
                assert len(jobs) == 1, f"two live jobs under pending+active key {key!r}"
            else:
                assert statuses["pending"] <= 1, f"two pending jobs under pending key {key!r}"
                assert statuses["active"] <= 1, f"two active jobs under pending key {key!r}"

    @invariant()
    def no_job_is_lost_or_invented(self) -> None:
        stored = {j.id: j for j in self.jobs()}
        assert set(stored) == set(self.accepted)
        assert self.backend.count_jobs() == len(self.accepted)
        for job_id, max_attempts in self.accepted.items():
            assert stored[job_id].max_attempts == max_attempts

    @invariant()
    def attempts_stay_within_bounds(self) -> None:
        for job in self.jobs():
            assert 0 <= job.attempts <= job.max_attempts, job

    @invariant()
    def active_jobs_are_exactly_the_current_claims(self) -> None:
        active = {j.id for j in self.jobs() if j.status == "active"}
        assert active == set(self.current)

    @invariant()
    def failed_jobs_have_a_kind_and_others_do_not(self) -> None:
        for job in self.jobs():
            assert (job.failure_kind is not None) == (job.status == "failed"), job

    @invariant()
    def stats_agree_with_the_listing(self) -> None:
        counts = Counter(j.status for j in self.jobs())
        stats = self.backend.get_stats()
        got = (stats.pending, stats.active, stats.completed, stats.failed, stats.superseded)
        want = tuple(counts[s] for s in ("pending", "active", "completed", "failed", "superseded"))
        assert got == want


class MongomockMachine(BackendMachine):
    kind = "mongomock"


class MemoryMachine(BackendMachine):
    kind = "memory"


class SqliteMachine(BackendMachine):
    kind = "sqlite"


TestMongomockBackendStateMachine = MongomockMachine.TestCase
TestMongomockBackendStateMachine.settings = SETTINGS
TestMemoryBackendStateMachine = MemoryMachine.TestCase
TestMemoryBackendStateMachine.settings = SETTINGS
TestSqliteBackendStateMachine = SqliteMachine.TestCase
TestSqliteBackendStateMachine.settings = SETTINGS
