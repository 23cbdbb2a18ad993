"""What runworkers' Runner asks of the queue: each option must reach it."""

from __future__ import annotations

import io
from typing import Any

import pytest

from durabl import JobQueue, MemoryBackend
from durabl_django.registry import JobSpec
from durabl_django.workers import Runner


class SpyQueue(JobQueue):
    def __init__(self) -> None:
        super().__init__(MemoryBackend())
        self.calls: list[tuple[str, Any]] = []

    def process(self, type: str, handler: Any, **options: Any) -> None:  # type: ignore[override]
        self.calls.append(("process", (type, options["concurrency"])))

    def start_reaper(self, interval: Any = None) -> Any:
        self.calls.append(("start_reaper", None))

    def install_signal_handlers(self, *, signals: Any = None, timeout: Any = 30.0) -> Any:
        self.calls.append(("install_signal_handlers", timeout))
        return lambda: None


def spec(type: str, concurrency: int) -> JobSpec:
    return JobSpec(type, lambda job, ctx: None, concurrency, None, None)


@pytest.mark.parametrize("reaper", [True, False])
def test_every_option_reaches_the_queue(reaper: bool) -> None:
    queue = SpyQueue()
    out = io.StringIO()
    runner = Runner(
        queue, [spec("a", 3), spec("b", 1)], reaper=reaper, shutdown_timeout=7.5, stdout=out
    )
    runner.start()
    try:
        assert ("process", ("a", 3)) in queue.calls and ("process", ("b", 1)) in queue.calls
        assert (("start_reaper", None) in queue.calls) is reaper
        assert ("install_signal_handlers", 7.5) in queue.calls
        assert "a (x3), b (x1)" in out.getvalue()
    finally:
        runner.drained.set()
        runner.wait()


def test_the_exit_line_says_when_the_drain_handed_jobs_back() -> None:
    from durabl import JobEvent

    queue = SpyQueue()
    out = io.StringIO()
    runner = Runner(queue, [spec("a", 1)], stdout=out)
    runner.start()
    queue.emit(JobEvent("shutdown-released", "a", "j1", op="released"))
    runner.drained.set()
    runner.wait()
    assert "1 job(s) still running were handed back" in out.getvalue()
