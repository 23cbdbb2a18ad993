"""What the journal keeps of an ``octx.send_event`` step: the event's name beside the ids of
the jobs it started (the admin's job page lists them from it), and a send journaled before
sends were named still replays."""

from __future__ import annotations

from typing import Any

from durabl import Job, JobQueue, Orchestrator
from durabl.orchestrator import OrchestrationContext
from durabl.orchestrator.journal import decode, decode_entry, step_entry
from durabl.stores.base import Backend
from durabl.testing import FakeClock, OrchestrationHarness

EVENT = "billing/invoice.sync"


def invoicing(sent: list[list[str]]) -> Any:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        sent.append(octx.send_event("sync", EVENT, {"invoice_id": 7}))
        octx.step("after", lambda keys, signal: None)

    return body


def test_a_send_step_journals_the_event_it_sent_and_a_plain_step_none() -> None:
    t = OrchestrationHarness(invoicing([]), subscriptions={EVENT: ["sync-invoice"]})
    assert t.run() == "completed"
    send, after = [e for e in t.journal if e["kind"] == "step"]
    assert send["event"] == EVENT and send["result"] == ["sync-invoice-1"]
    assert "event" not in after
    assert [(s.name, s.event) for s in t.steps] == [("sync", EVENT), ("after", None)]


def test_a_step_entry_without_an_event_decodes_as_a_plain_step() -> None:
    entry = step_entry(0, "sync", ["a"], key="k", at=FakeClock().now(), attempt=1)
    assert "event" not in entry
    assert decode_entry(entry).event is None
    named = step_entry(0, "sync", ["a"], key="k", at=FakeClock().now(), attempt=1, event=EVENT)
    assert decode_entry(named).event == EVENT and decode_entry(named).result == ["a"]


def test_a_send_journaled_before_sends_were_named_replays_without_sending_again(
    backend: Backend, clock: FakeClock
) -> None:
    """A journal written by an earlier release: the send step's entry has no event name.
    The resumed body gets the journaled ids back and starts no job."""
    q = JobQueue(backend, visibility_timeout=30.0, clock=clock)
    try:
        _replay_an_unnamed_send(q, backend, clock)
    finally:
        q.shutdown(timeout=2)


def _replay_an_unnamed_send(q: JobQueue, backend: Backend, clock: FakeClock) -> None:
    q.register("sync-invoice", lambda job, ctx: None, on_event=EVENT)
    sent: list[list[str]] = []
    orch = Orchestrator(q)
    orch.define("invoicing", invoicing(sent), start=False)
    q.register("invoicing", orch.definitions["invoicing"].handler)
    job_id = q.enqueue("invoicing", {}, max_attempts=2) or ""
    (handle,) = backend.claim("invoicing", lease_owner="old-release")
    old = step_entry(
        0, "sync", ["started-earlier"], key=f"{job_id}:sync:0", at=clock.now(), attempt=1
    )
    assert handle.append_journal([old], position=0) == "applied"
    assert handle.fail("the worker went away", retry_at=clock.now()) == "retry-scheduled"
    assert q.run_pending("invoicing") == 1
    job = q.get_job(job_id)
    assert job is not None and job.status == "completed"
    assert sent == [["started-earlier"]]
    assert q.list_jobs(type="sync-invoice") == []
    steps, _ = decode(job.journal)
    assert [(s.name, s.event) for s in steps] == [("sync", None), ("after", None)]
