"""Worker threads treat each job like a request: stale database connections are dropped."""

from __future__ import annotations

from typing import Any

import pytest

from durabl.orchestrator import OrchestrationHandler
from durabl_django import workers


def test_each_job_is_bracketed_by_close_old_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(workers, "close_old_connections", lambda: calls.append("close"))

    def handler(job: Any, ctx: Any) -> None:
        calls.append("run")

    workers.with_fresh_connections(handler)(object(), object())
    assert calls == ["close", "run", "close"]


def test_connections_are_dropped_even_when_the_job_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(workers, "close_old_connections", lambda: calls.append("close"))

    def handler(job: Any, ctx: Any) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        workers.with_fresh_connections(handler)(object(), object())
    assert calls == ["close", "close"]


def test_an_orchestration_stays_an_orchestration() -> None:
    def body(job: Any, octx: Any) -> None:
        return None

    wrapped = workers.with_fresh_connections(OrchestrationHandler(body, step_timeout=5))
    assert isinstance(wrapped, OrchestrationHandler)
    assert wrapped.step_timeout == 5
