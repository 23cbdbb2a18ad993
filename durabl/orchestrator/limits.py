"""The limits of an orchestration's runs, checked once for every place that takes them
(:class:`~durabl.orchestrator.OrchestrationHandler`, :class:`~durabl.orchestrator.Orchestrator`
defaults and :class:`~durabl.testing.OrchestrationHarness`)."""

from __future__ import annotations

from dataclasses import dataclass

from durabl.model.clock import Seconds, to_seconds
from durabl.orchestrator.journal import DEFAULT_MAX_JOURNAL_BYTES


def _positive_seconds(value: Seconds | None, name: str) -> float | None:
    if value is None:
        return None
    seconds = to_seconds(value, name)
    if seconds <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return seconds


@dataclass(frozen=True)
class RunLimits:
    """``max_journal_bytes`` caps the journal (the job's data shares the budget);
    ``step_timeout`` is the default per-step timeout (None: the caller's default);
    ``max_duration`` bounds one run of the body (None: unbounded)."""

    max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES
    step_timeout: float | None = None
    max_duration: float | None = None

    @classmethod
    def checked(
        cls,
        *,
        max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES,
        step_timeout: Seconds | None = None,
        max_duration: Seconds | None = None,
    ) -> RunLimits:
        """The limits, or ``ValueError``/``TypeError`` naming the one that is wrong."""
        if (
            isinstance(max_journal_bytes, bool)
            or not isinstance(max_journal_bytes, int)
            or max_journal_bytes < 1
        ):
            raise ValueError(f"max_journal_bytes must be an int >= 1, got {max_journal_bytes!r}")
        return cls(
            max_journal_bytes,
            _positive_seconds(step_timeout, "step_timeout"),
            _positive_seconds(max_duration, "max_duration"),
        )

    def run_limit(self, started: float) -> tuple[float, str] | None:
        """The deadline of a run that started at ``started`` (monotonic seconds) and the
        reason it fails with, or None without ``max_duration``."""
        if self.max_duration is None:
            return None
        reason = f"max-duration: the run took longer than {self.max_duration:g} s"
        return started + self.max_duration, reason
