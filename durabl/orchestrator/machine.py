"""The parts of the step machine that ``octx``'s step kinds share.

:class:`~durabl.orchestrator.context.OrchestrationContext` is the step machine: it holds
the journal, replays it and appends to it. The kinds of steps kept in modules of their own
(child jobs in :mod:`durabl.orchestrator.children`, signal waits in
:mod:`durabl.orchestrator.signal_waits`) are its base classes, and call these parts of it,
declared here once so each of them type-checks on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

from durabl.model.job import Job
from durabl.orchestrator import journal as jr

R = TypeVar("R")


class StepHooksLike(Protocol):
    def step_ran(self, name: str) -> None: ...

    def step_journaled(self, name: str) -> None: ...


class StepMachine:
    """What the step kinds read of the machine, and the machine's own methods they call
    (:class:`~durabl.orchestrator.context.OrchestrationContext` defines each)."""

    job: Job[Any]
    _hooks: StepHooksLike
    _cursor: int
    _entries: list[jr.StepRecord]
    _journal: list[dict[str, Any]]

    @property
    def replaying(self) -> bool:
        raise NotImplementedError

    def _check_halt(self) -> None:
        raise NotImplementedError

    def _halt_if_aborted(self) -> None:
        raise NotImplementedError

    def _stop(self, exc: BaseException) -> NoReturn:
        raise NotImplementedError

    def _guard(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        raise NotImplementedError

    def _replay(self, kind: str, name: str) -> jr.StepRecord | None:
        raise NotImplementedError

    def _append(self, entries: list[dict[str, Any]], step: str) -> None:
        raise NotImplementedError
