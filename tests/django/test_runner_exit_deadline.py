"""``manage.py runworkers`` has the exit safety net ``durabl worker`` has: whatever holds the
exit up past the shutdown timeout plus ``DRAIN_GRACE`` plus ``EXIT_GRACE`` after the first
signal (an exit hook, a thread that is not a daemon, a store that does not answer), the
process stops itself then, with exit code 1 and a line on stderr. It used to wait for
whatever held it up, until the platform's SIGKILL."""

from __future__ import annotations

import io
import signal
import threading
from collections.abc import Iterator

import pytest

import durabl
from durabl import JobQueue, MemoryBackend
from durabl.cli.exits import ABORT_EXIT_CODE, EXIT_GRACE
from durabl.runtime.shutdown import DRAIN_GRACE
from durabl_django.management.commands import runworkers
from durabl_django.registry import JobSpec
from durabl_django.workers import Runner

TIMEOUT = 0.1


class Exits:
    """Stands in for ``os._exit``: records the code instead of ending pytest."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


@pytest.fixture
def restored_signals() -> Iterator[None]:
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def runner_with_deadline(exits: Exits, err: io.StringIO) -> Runner:
    queue = JobQueue(MemoryBackend())
    spec = JobSpec("t", lambda job, ctx: None, poll_interval=0.05)
    deadline = durabl.ExitDeadline(TIMEOUT, name="durabl", stderr=err, hard_exit=exits)
    return Runner(
        queue,
        [spec],
        reaper=False,
        scheduler=False,
        shutdown_timeout=TIMEOUT,
        stdout=io.StringIO(),
        stderr=err,
        hard_exit=exits,
        exit_deadline=deadline,
    )


def test_runworkers_that_has_not_exited_in_time_is_ended_with_code_1(
    restored_signals: None,
) -> None:
    exits, err = Exits(), io.StringIO()
    runner = runner_with_deadline(exits, err)
    runner.start()
    runner._on_signal(signal.SIGTERM, None)  # as the signal would
    runner.wait()  # drained; the interpreter's exit would come next, and hang
    limit = TIMEOUT + DRAIN_GRACE + EXIT_GRACE
    assert not exits.called.wait(limit - 0.5), "stopped before the bound"
    assert exits.called.wait(5), "an exit that never ends was never stopped"
    assert exits.codes == [ABORT_EXIT_CODE]
    assert f"durabl: not exited {limit:g} s after the signal" in err.getvalue()


def test_without_a_signal_the_deadline_never_fires(restored_signals: None) -> None:
    exits, err = Exits(), io.StringIO()
    runner = runner_with_deadline(exits, err)
    runner.start()
    assert runner.exit_deadline is not None and not runner.exit_deadline.armed
    runner.exit_deadline.cancel()  # the command does this when its start fails
    runner.queue.shutdown(timeout=1)
    threading.Event().wait(TIMEOUT + DRAIN_GRACE + EXIT_GRACE + 0.3)
    assert exits.codes == []


def test_the_command_gives_its_runner_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Runner] = []

    class Stop(Exception):
        pass

    def start(self: Runner) -> None:
        made.append(self)
        raise Stop

    monkeypatch.setattr(runworkers, "declared_jobs", lambda: {"t": JobSpec("t", print)})
    monkeypatch.setattr(Runner, "start", start)
    monkeypatch.setattr(runworkers, "get_queue", lambda: JobQueue(MemoryBackend()))
    with pytest.raises(runworkers.CommandError):
        runworkers.Command().handle(
            types=None,
            concurrency=None,
            no_reaper=True,
            no_scheduler=True,
            metrics_port=None,
            shutdown_timeout=4.0,
        )
    (runner,) = made
    assert isinstance(runner.exit_deadline, durabl.ExitDeadline)
    assert runner.exit_deadline.limit == 4.0 + DRAIN_GRACE + EXIT_GRACE
    assert not runner.exit_deadline.armed
