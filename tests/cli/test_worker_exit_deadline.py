"""``durabl worker``'s first signal starts the drain at once, even while the main thread is
still starting the processors; and whatever holds the exit up past the timeout plus
``DRAIN_GRACE`` plus ``EXIT_GRACE`` (an exit hook, a thread that is not a daemon, a store
call of the startup), the worker stops itself then, with code 1 and a line saying why."""

from __future__ import annotations

import io
import signal
import threading
from collections.abc import Iterator

import pytest

from durabl.cli.worker import ABORT_EXIT_CODE, EXIT_GRACE, Worker
from durabl.runtime.shutdown import DRAIN_GRACE
from tests.cli.test_drain_progress import DrainingQueue

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
def worker() -> Iterator[tuple[Worker, Exits, io.StringIO]]:
    exits, err = Exits(), io.StringIO()
    made = Worker(DrainingQueue(overrun=0.0), TIMEOUT, out=io.StringIO(), err=err, hard_exit=exits)  # type: ignore[arg-type]
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    made.install()
    try:
        yield made, exits, err
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_the_first_signal_starts_the_drain_without_the_main_thread(
    worker: tuple[Worker, Exits, io.StringIO],
) -> None:
    made, _, _ = worker
    made.on_signal(signal.SIGTERM, None)  # the main thread goes on starting processors
    assert made.drained.wait(5), "the drain waited for the main thread"


def test_an_exit_that_overruns_its_bound_is_ended_with_code_1(
    worker: tuple[Worker, Exits, io.StringIO],
) -> None:
    made, exits, err = worker
    made.on_signal(signal.SIGTERM, None)
    assert made.wait() == 0  # drained; the interpreter's exit would come next
    limit = TIMEOUT + DRAIN_GRACE + EXIT_GRACE
    assert not exits.called.wait(limit - 0.5), "stopped before the bound"
    assert exits.called.wait(5), "an exit that never ends was never stopped"
    assert exits.codes == [ABORT_EXIT_CODE]
    assert f"not exited {limit:g} s after the signal" in err.getvalue()
