"""Random sequences of claims over jobs with concurrency keys and limits, on the stores
a test can make by the hundred (memory, mongomock, SQLite; a fake clock): after each step
no key has more active jobs than the limit its active
jobs were claimed under, a held-back job has used no attempt, and a claim that returns
less than asked left only jobs whose key was full (or that are not due)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from durabl.model.job import JobHandle
from durabl.model.options import build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.conftest import cleanup_backend, make_backend

VT = 30.0
KEYS = ("k1", "k2", None)
LIMITS = {"k1": 1, "k2": 2}  # one limit per key, as keys are used (see docs/flow-control.md)
SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class FlowMachine(RuleBasedStateMachine):
    kind = ""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.backend: Backend = make_backend(self.kind, self.clock)
        self.backend.startup()
        self.limits: dict[str, int] = {}  # job id -> its concurrency limit
        self.keys: dict[str, str | None] = {}  # job id -> its key
        self.active: dict[str, JobHandle[Any]] = {}

    def teardown(self) -> None:
        cleanup_backend(self.backend)

    @rule(key=st.sampled_from(KEYS), priority=st.integers(0, 1))
    def enqueue(self, key: str | None, priority: int) -> None:
        limit = LIMITS.get(key or "", 1)
        job = build_new_job(
            "t",
            {},
            priority=priority,
            concurrency_key=key,
            concurrency_limit=limit if key else None,
            now=self.backend.now(),
        )
        job_id = self.backend.enqueue(job).job_id
        assert job_id is not None
        self.keys[job_id], self.limits[job_id] = key, limit

    @rule(n=st.integers(1, 4))
    def claim(self, n: int) -> None:
        handles = self.backend.claim("t", limit=n, lease_owner="m")
        for h in handles:
            key = self.keys[h.id]
            if key is not None:  # it had room when claimed
                holding = sum(1 for j in self.active if self.keys[j] == key)
                assert holding < self.limits[h.id], (key, holding, self.limits[h.id])
            self.active[h.id] = h
        if len(handles) < n:
            # Whatever is still pending and due was left for its key.
            for job in self.backend.list_jobs(status="pending", limit=0):
                key = self.keys[job.id]
                assert key is not None, "a due job without a key was left behind"
                holding = sum(1 for j in self.active if self.keys[j] == key)
                assert holding >= self.limits[job.id], (key, holding, self.limits[job.id])

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data(), how=st.sampled_from(["complete", "release", "retry", "reap"]))
    def end(self, data: st.DataObject, how: str) -> None:
        job_id = list(self.active)[data.draw(st.integers(0, len(self.active) - 1))]
        h = self.active.pop(job_id)
        if how == "complete":
            self.backend.complete(h.id, h.claim_token)
        elif how == "release":
            self.backend.release(h.id, h.claim_token)
        elif how == "retry":
            self.backend.fail(h.id, h.claim_token, "x", retry_at=self.backend.now())
        else:
            # Every active job's lease runs out: the reaper returns them all.
            self.clock.advance(VT + getattr(self.backend, "clock_skew_allowance", 0) + 1)
            self.backend.reap(VT)
            self.active.clear()

    @invariant()
    def keys_within_their_limits(self) -> None:
        active = self.backend.list_jobs(status="active", limit=0)
        assert {j.id for j in active} == set(self.active)
        per_key = Counter(self.keys[j.id] for j in active if self.keys[j.id] is not None)
        for key, n in per_key.items():
            assert n <= max(self.limits[j.id] for j in active if self.keys[j.id] == key)

    @invariant()
    def held_back_jobs_use_no_attempt(self) -> None:
        for job in self.backend.list_jobs(status="pending", limit=0):
            assert job.attempts <= job.max_attempts


def _case(kind: str) -> Any:
    machine = type(f"{kind.title()}FlowMachine", (FlowMachine,), {"kind": kind})
    case = machine.TestCase
    case.settings = SETTINGS
    return case


TestMemoryFlow = _case("memory")
TestMongomockFlow = _case("mongomock")
TestSqliteFlow = _case("sqlite")
