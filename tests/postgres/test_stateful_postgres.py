"""The contract suite's state machine (random sequences of every operation, invariants
after each step) on PostgreSQL: each example on tables of its own."""

from __future__ import annotations

from hypothesis import settings

from tests.contract.test_stateful import SETTINGS, BackendMachine


class PostgresMachine(BackendMachine):
    kind = "postgres"


TestPostgresBackendStateMachine = PostgresMachine.TestCase
# Fewer examples than in memory: each one makes and drops its tables on the server (about
# 0.3 s per example, so 40 take ~12 s of the CI budget).
TestPostgresBackendStateMachine.settings = settings(SETTINGS, max_examples=40)
