"""An orchestration's run limits are checked by one rule wherever they are given."""

from __future__ import annotations

from typing import Any

import pytest

from durabl import JobQueue, MemoryBackend, Orchestrator
from durabl.orchestrator import OrchestrationHandler
from durabl.testing import OrchestrationHarness


def body(job: Any, octx: Any) -> None:
    return None


BAD = [
    ({"max_journal_bytes": 0}, "max_journal_bytes"),
    ({"max_journal_bytes": True}, "max_journal_bytes"),
    ({"step_timeout": 0}, "step_timeout"),
    ({"max_duration": -1}, "max_duration"),
]


@pytest.mark.parametrize(("options", "name"), BAD)
def test_the_handler_the_orchestrator_and_the_harness_refuse_the_same_limits(
    options: dict[str, Any], name: str
) -> None:
    queue = JobQueue(MemoryBackend())
    try:
        with pytest.raises(ValueError, match=name):
            OrchestrationHandler(body, **options)
        with pytest.raises(ValueError, match=name):
            Orchestrator(queue, **options)
        with pytest.raises(ValueError, match=name):
            Orchestrator(queue).define("t", body, start=False, **options)
        with pytest.raises(ValueError, match=name):
            OrchestrationHarness(body, **options)
    finally:
        queue.shutdown()


def test_max_duration_sets_the_deadline_and_its_reason() -> None:
    handler = OrchestrationHandler(body, max_duration=2.5)
    assert handler.limits.run_limit(10.0) == (
        12.5,
        "max-duration: the run took longer than 2.5 s",
    )
    assert OrchestrationHandler(body).limits.run_limit(10.0) is None
