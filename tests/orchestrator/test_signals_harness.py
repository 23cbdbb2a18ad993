"""octx.wait_for_signal through OrchestrationHarness: a signal kept until the wait, the
order of several, the timeout, replay after crashes, and the checks of a wait and a send."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durabl import Job, NondeterminismError, Signal
from durabl.orchestrator import OrchestrationContext
from durabl.testing import FakeClock, OrchestrationHarness


def approval(received: list[Signal | None], timeout: float | None = None) -> Any:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        received.append(octx.wait_for_signal("approval", "approve", timeout=timeout))
        octx.step("after", lambda keys, signal: None)

    return body


def test_a_wait_suspends_without_a_signal_and_receives_the_one_sent_then() -> None:
    received: list[Signal | None] = []
    t = OrchestrationHarness(approval(received))
    assert t.run() == "waiting"
    assert t.waiting_for == "signal:approve"
    assert t.resume() == "waiting"  # nothing sent: it waits again, the clock unmoved
    t.send_signal("approve", {"by": "ana"})
    assert t.resume() == "completed"
    assert received[-1] == Signal("approve", {"by": "ana"}, t.clock.now())
    assert [s.kind for s in t.steps] == ["wait", "signal", "step"]
    assert t.attempts == 1  # waiting uses no attempt


def test_a_signal_sent_before_the_wait_is_kept_and_received_at_once() -> None:
    received: list[Signal | None] = []
    t = OrchestrationHarness(approval(received))
    t.send_signal("approve", 7)
    assert t.run() == "completed"
    assert [s.data if s else None for s in received] == [7]
    assert [s.kind for s in t.steps] == ["signal", "step"]


def test_several_signals_of_one_name_come_one_per_wait_in_the_order_sent() -> None:
    got: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        for i in range(3):
            sig = octx.wait_for_signal(f"item-{i}", "item")
            got.append(None if sig is None else sig.data)

    t = OrchestrationHarness(body)
    t.send_signal("other", "not this one")
    t.send_signal("item", "a")
    t.send_signal("item", "b")
    assert t.run() == "waiting"
    t.send_signal("item", "c")
    assert t.resume() == "completed"
    assert got[-3:] == ["a", "b", "c"]


def test_the_timeout_passing_returns_none_once_and_for_good() -> None:
    received: list[Signal | None] = []
    clock = FakeClock()
    t = OrchestrationHarness(approval(received, timeout=3600), clock=clock)
    start = clock.now()
    assert t.run() == "waiting"
    assert t.wake_at == start + timedelta(hours=1)
    assert t.resume() == "completed"  # resume() lets the timeout pass
    assert received[-1] is None
    t.send_signal("approve")  # too late: the wait's None is journaled
    received.clear()
    t2 = OrchestrationHarness(approval(received, timeout=0))
    assert t2.run() == "completed" and received == [None]


def test_a_crash_after_the_signal_was_journaled_replays_the_same_signal() -> None:
    received: list[Signal | None] = []
    t = OrchestrationHarness(approval(received))
    t.send_signal("approve", "first")
    assert t.crash_after("approval") == "crashed"
    t.send_signal("approve", "second")
    assert t.resume() == "completed"
    assert [s.data if s else None for s in received] == ["first"]  # the replay's
    assert [s.signal_seq for s in t.steps if s.kind == "signal"] == [0]


def test_a_crash_before_the_signal_was_journaled_receives_it_again_not_the_next() -> None:
    received: list[Signal | None] = []
    t = OrchestrationHarness(approval(received))
    t.send_signal("approve", "first")
    t.send_signal("approve", "second")
    assert t.crash_before("approval") == "crashed"
    assert t.resume() == "completed"
    assert [s.data if s else None for s in received] == ["first"]  # the crashed read: none
    assert [s.signal_seq for s in t.steps if s.kind == "signal"] == [0]


def test_a_body_that_waits_for_another_signal_on_resume_is_nondeterministic() -> None:
    t = OrchestrationHarness(approval([]))
    t.send_signal("approve")
    assert t.run() == "completed"

    def changed(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.wait_for_signal("approval", "reject")

    with pytest.raises(
        NondeterminismError, match=r"is for signal 'approve', but the body now waits for 'reject'"
    ):
        t.resume_with(changed)


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [("", None, ValueError), (3, None, TypeError), ("ok", object(), TypeError)],
)
def test_a_bad_signal_is_refused_before_it_is_kept(name: Any, data: Any, error: type) -> None:
    t = OrchestrationHarness(approval([]))
    with pytest.raises(error):
        t.send_signal(name, data)
    assert t.run() == "waiting"


def test_a_bad_wait_is_refused() -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.wait_for_signal("w", "approve", timeout=-1)

    with pytest.raises(ValueError, match="negative"):
        OrchestrationHarness(body).run()
