"""octx.start_children and octx.gather through OrchestrationHarness: children created once
(crash before or after the step's journal entry), a gather that waits until the test ends
them, failed children returned, the timeout, replay, and the checks of both calls."""

from __future__ import annotations

from typing import Any

import pytest

import durabl
from durabl import Child, Job, NondeterminismError, WaitTimeout
from durabl.orchestrator import OrchestrationContext
from durabl.testing import OrchestrationHarness


def fan_out(outcome: list[Any], n: int = 3, timeout: float | None = None) -> Any:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        ids = octx.start_children("fan-out", [Child("resize", {"image": i}) for i in range(n)])
        done = octx.gather("fan-in", ids, timeout=timeout)
        outcome[:] = [(j.id, j.status, j.result, j.fail_reason) for j in done]
        octx.step("reduce", lambda keys, signal: sum(j.result or 0 for j in done))

    return body


def test_children_are_created_with_their_parent_and_the_gather_waits_for_them() -> None:
    outcome: list[Any] = []
    t = OrchestrationHarness(fan_out(outcome), job_id="parent-1")
    assert t.run() == "waiting"
    assert t.waiting_for == "children:fan-in"
    assert [(c.type, c.data, c.status, c.parent_id) for c in t.children] == [
        ("resize", {"image": i}, "pending", "parent-1") for i in range(3)
    ]
    assert [c.parent_step for c in t.children] == [f"fan-out#{i}" for i in range(3)]
    first, second, third = (c.id for c in t.children)
    t.finish_child(first, result=1)
    assert t.resume() == "waiting"  # two are still live: it waits again, the clock unmoved
    t.finish_child(second, "failed", reason="no such image")
    t.finish_child(third, result=3)
    assert t.resume() == "completed"
    assert outcome == [
        (first, "completed", 1, None),
        (second, "failed", None, "no such image"),  # returned, not raised
        (third, "completed", 3, None),
    ]
    assert t.steps[-1].result == 4
    assert [s.kind for s in t.steps] == ["spawn", "children", "gather", "gathered", "step"]
    assert t.attempts == 1  # waiting uses no attempt


@pytest.mark.parametrize("crash", ["crash_before", "crash_after"])
def test_a_crash_around_the_journal_write_creates_the_children_once(crash: str) -> None:
    outcome: list[Any] = []
    t = OrchestrationHarness(fan_out(outcome), job_id="parent-1")
    assert getattr(t, crash)("fan-out") == "crashed"
    assert len(t.children) == 3
    assert t.resume() == "waiting"
    assert len(t.children) == 3  # found by parent and place, not created again
    for child in t.children:
        t.finish_child(child.id, result=2)
    assert t.resume() == "completed"
    assert [o[0] for o in outcome] == [c.id for c in t.children]


def test_a_gathered_result_replays_after_a_crash_whatever_the_children_became() -> None:
    outcome: list[Any] = []
    t = OrchestrationHarness(fan_out(outcome, n=1), job_id="parent-1")
    t.run()
    t.finish_child(t.children[0].id, result=5)
    assert t.crash_after("fan-in") == "crashed"
    assert t.resume() == "completed"
    assert outcome == [(t.children[0].id, "completed", 5, None)]


def test_the_timeout_raises_wait_timeout_and_replays_it() -> None:
    caught: list[str] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        ids = octx.start_children("fan-out", [Child("resize", {"image": 1})])
        try:
            octx.gather("fan-in", ids, timeout=3600)
        except WaitTimeout as exc:
            caught.append(str(exc))
        octx.step("after", lambda keys, signal: "went on")

    t = OrchestrationHarness(body)
    start = t.clock.now()
    assert t.run() == "waiting"
    assert t.wake_at is not None and (t.wake_at - start).total_seconds() == 3600
    assert t.resume() == "completed"  # the timeout elapses
    assert len(caught) == 1 and "fan-in" in caught[0]
    assert issubclass(WaitTimeout, durabl.DurablError)
    assert [s.kind for s in t.steps][-2:] == ["gathered", "step"]


def test_an_uncaught_wait_timeout_fails_the_body() -> None:
    t = OrchestrationHarness(fan_out([], timeout=0))
    with pytest.raises(WaitTimeout):
        t.run()


def test_gathering_finished_children_returns_at_once() -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> list[str]:
        ids = octx.start_children("fan-out", [])
        return [j.status for j in octx.gather("fan-in", ids)]

    t = OrchestrationHarness(body)
    assert t.run() == "completed"
    assert t.children == []


@pytest.mark.parametrize(
    ("children", "error"),
    [
        ("resize", TypeError),
        ([("resize", {})], TypeError),
        ([Child("resize", {}, dedupe_key="k")], ValueError),
        ([Child("resize", {}, coalesce="latest", dedupe_key="k")], ValueError),
        ([Child("resize", object())], TypeError),
    ],
)
def test_bad_children_are_refused_and_none_is_created(children: Any, error: type) -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.start_children("fan-out", children)

    t = OrchestrationHarness(body)
    with pytest.raises(error):
        t.run()
    assert t.children == []


@pytest.mark.parametrize(("ids", "error"), [("abc", TypeError), ([1], TypeError)])
def test_bad_gather_ids_are_refused(ids: Any, error: type) -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.gather("fan-in", ids)

    with pytest.raises(error):
        OrchestrationHarness(body).run()


def test_a_changed_step_name_is_nondeterminism() -> None:
    t = OrchestrationHarness(fan_out([]))
    t.run()

    def renamed(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.start_children("spread", [Child("resize", {"image": 0})])

    with pytest.raises(NondeterminismError):
        t.resume_with(renamed)
