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


def waiting_in_runner_wait(thread_id: int, timeout: float = 10) -> bool:
    """Whether the thread gets into ``Runner.wait``'s wait on its event in time."""
    import sys
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread_id)
        calls = []
        while frame is not None:
            calls.append((frame.f_code.co_filename, frame.f_code.co_name))
            frame = frame.f_back
        in_runner = any(path.endswith("workers.py") and name == "wait" for path, name in calls)
        if in_runner and calls[0][1] == "wait":  # below it, threading's Condition.wait
            return True
        time.sleep(0.01)
    return False


def test_a_signal_delivered_to_another_thread_still_starts_the_drain() -> None:
    """The kernel may hand a process's SIGTERM to any thread. Python runs the handler only
    in the main thread, which a lock wait with no timeout does not leave to run it: the
    command would wait for a drain nobody started (a runworkers that ignored SIGTERM
    under load)."""
    import signal
    import threading

    queue = JobQueue(MemoryBackend())
    runner = Runner(
        queue,
        [spec("a", 1)],
        reaper=False,
        shutdown_timeout=5,
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    runner.start()
    main = threading.get_ident()
    outcome: dict[str, bool] = {}

    def signal_from_here() -> None:
        # Only once the main thread waits in Runner.wait: the signal must find it blocked.
        outcome["blocked"] = waiting_in_runner_wait(main)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        outcome["drained"] = runner.drained.wait(10)
        runner.drained.set()  # ends the test's wait should the signal stay unhandled

    sender = threading.Thread(target=signal_from_here, daemon=True)
    sender.start()
    runner.wait()
    sender.join(15)
    assert outcome["blocked"]
    assert outcome["drained"], "the SIGTERM handled by another thread never started the drain"
    assert queue.draining is not None and queue.draining.result(10) is None
