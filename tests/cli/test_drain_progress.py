"""``durabl worker``'s drain progress: one line per whole second at most, and none past the
shutdown timeout (the drain then hands jobs back, and its last line says how many)."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from durabl.cli.worker import Worker, drain_report_interval


@dataclass
class Handle:
    type: str


@dataclass
class Run:
    handle: Handle
    job_id: str


class DrainingQueue:
    """What :class:`Worker` uses of a queue: a drain that runs ``overrun`` seconds past its
    timeout (as a real one may, handing jobs back), with one job running throughout."""

    def __init__(self, overrun: float) -> None:
        self.overrun = overrun

    def add_event_sink(self, sink: Callable[[Any], None], kinds: Any) -> Callable[[], None]:
        return lambda: None

    def shutdown(self, timeout: float) -> None:
        threading.Event().wait(timeout + self.overrun)

    def active_runs(self) -> list[Run]:
        return [Run(Handle("report"), "job-1")]


@pytest.mark.parametrize("timeout", [2.0, 30.0])
def test_report_interval_is_a_whole_second_or_more(timeout: float) -> None:
    every = drain_report_interval(timeout)
    assert every >= 1 and every == int(every) and every < timeout


def test_drain_lines_neither_repeat_nor_overshoot_the_timeout() -> None:
    err = io.StringIO()
    worker = Worker(DrainingQueue(overrun=0.9), 2.0, out=io.StringIO(), err=err)  # type: ignore[arg-type]
    worker.signalled.set()  # as the first SIGTERM does
    assert worker.wait() == 0
    seconds = [int(s) for s in re.findall(r"draining for (\d+) s of 2 s", err.getvalue())]
    assert seconds == [1], err.getvalue()
