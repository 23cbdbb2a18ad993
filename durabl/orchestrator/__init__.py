"""Step-level durability: journaled steps, resume, durable sleep, determinism checks.

An orchestration body is a job handler that calls ``octx.step(...)`` for each side effect;
completed steps are journaled on the job and replayed on resume, so a crash re-runs only
the unfinished tail. See ``docs/orchestration.md``.
"""

from __future__ import annotations

from durabl.orchestrator.context import Body, OrchestrationContext, StepKeys
from durabl.orchestrator.journal import DEFAULT_MAX_JOURNAL_BYTES, StepRecord, StepResultError
from durabl.orchestrator.orchestrator import (
    JournalUnsupportedError,
    OrchestrationDefinition,
    OrchestrationHandler,
    Orchestrator,
)

__all__ = [
    "DEFAULT_MAX_JOURNAL_BYTES",
    "Body",
    "JournalUnsupportedError",
    "OrchestrationContext",
    "OrchestrationDefinition",
    "OrchestrationHandler",
    "Orchestrator",
    "StepKeys",
    "StepRecord",
    "StepResultError",
]
