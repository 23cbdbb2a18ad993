"""Events that start jobs, on every store: one job of every subscribed type per send,
subscriptions kept in the store (a queue over the same store that declared nothing still
starts them), ``unsubscribe``, ``dedupe_key`` (a repeat while the jobs are live starts
nothing; racing senders start one set), the ``event-sent`` event, and bad input refused
with nothing written."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import durabl
from durabl import JobEvent, JobQueue, Subscription
from durabl.runtime.declared import registry
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, second_view

INVOICE = "billing/invoice.sync"


@pytest.fixture
def declared() -> Iterator[list[str]]:
    """Types declared by a test, forgotten afterwards (the registry is process-wide)."""
    names: list[str] = []
    yield names
    for name in names:
        registry.remove(name)


def declare(names: list[str], type: str, on_event: str | tuple[str, ...]) -> None:
    names.append(type)
    durabl.job(type, on_event=on_event)(lambda job, ctx: None)


def other_queue(backend: Backend, clock: FakeClock) -> JobQueue:
    """A queue of another process over the same store (the same object where the store
    lives inside one object)."""
    return JobQueue(second_view(backend, clock), visibility_timeout=30, clock=clock)


def test_sending_an_event_starts_one_job_of_every_subscribed_type(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    declare(declared, "mail-invoice", (INVOICE, "billing/refund"))
    declare(declared, "unrelated", "crm/contact.created")
    ids = queue.send_event(INVOICE, {"invoice_id": 7})
    jobs = [queue.get_job(job_id) for job_id in ids]
    assert sorted((j.type, j.data, j.status) for j in jobs if j is not None) == [
        ("mail-invoice", {"invoice_id": 7}, "pending"),
        ("sync-invoice", {"invoice_id": 7}, "pending"),
    ]
    assert queue.count_jobs() == 2
    (refund,) = queue.send_event("billing/refund")
    job = queue.get_job(refund)
    assert job is not None and (job.type, job.data) == ("mail-invoice", {})


def test_an_event_no_type_subscribes_to_starts_nothing(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    assert queue.send_event("billing/nobody-listens", {"x": 1}) == []
    assert queue.count_jobs() == 0


def test_subscriptions_are_kept_in_the_store_for_queues_that_declared_nothing(
    backend: Backend, clock: FakeClock, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    worker = JobQueue(backend, visibility_timeout=30, clock=clock)
    worker.startup()  # records the declarations of its process
    for name in declared:
        registry.remove(name)  # the web process never imported the worker's module
    declared.clear()
    web = other_queue(backend, clock)
    try:
        assert web.list_subscriptions() == [Subscription(INVOICE, "sync-invoice")]
        (job_id,) = web.send_event(INVOICE, {"invoice_id": 8})
        handle = claim_one(backend, "sync-invoice")
        assert (handle.id, handle.data) == (job_id, {"invoice_id": 8})
    finally:
        web.shutdown(timeout=2)
        worker.shutdown(timeout=2)


def test_a_subscription_given_to_process_is_recorded_and_listed(queue: JobQueue) -> None:
    queue.register("sync-invoice", lambda job, ctx: None, on_event=(INVOICE, "billing/x"))
    assert queue.list_subscriptions() == [  # by event, then type
        Subscription(INVOICE, "sync-invoice"),
        Subscription("billing/x", "sync-invoice"),
    ]
    assert queue.run_pending() == 0
    (job_id,) = queue.send_event("billing/x", {"n": 1})
    assert queue.run_pending() == 1
    job = queue.get_job(job_id)
    assert job is not None and job.status == "completed"


def test_unsubscribe_removes_the_subscription_from_the_store(
    backend: Backend, clock: FakeClock, queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    declare(declared, "mail-invoice", INVOICE)
    queue.startup()
    assert queue.unsubscribe("mail-invoice", INVOICE) is True
    assert queue.unsubscribe("mail-invoice", INVOICE) is False
    assert queue.list_subscriptions() == [Subscription(INVOICE, "sync-invoice")]
    (job_id,) = queue.send_event(INVOICE)
    job = queue.get_job(job_id)
    assert job is not None and job.type == "sync-invoice"
    registry.remove("mail-invoice")  # deployed without the declaration
    other = other_queue(backend, clock)
    try:
        other.startup()
        assert [s.type for s in other.list_subscriptions()] == ["sync-invoice"]
    finally:
        other.shutdown(timeout=2)
    durabl.job("mail-invoice", on_event=INVOICE)(lambda job, ctx: None)  # declared again
    again = other_queue(backend, clock)
    try:
        again.startup()  # a process that declares it records it again when it starts
        assert [s.type for s in again.list_subscriptions()] == ["mail-invoice", "sync-invoice"]
    finally:
        again.shutdown(timeout=2)


def test_a_dedupe_key_starts_nothing_more_while_the_jobs_it_started_are_live(
    queue: JobQueue, backend: Backend, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    declare(declared, "mail-invoice", INVOICE)
    first = queue.send_event(INVOICE, {"invoice_id": 7}, dedupe_key="invoice-7")
    assert len(first) == 2
    assert queue.send_event(INVOICE, {"invoice_id": 7}, dedupe_key="invoice-7") == []
    claim_one(backend, "sync-invoice")  # active still counts
    assert queue.send_event(INVOICE, {"invoice_id": 7}, dedupe_key="invoice-7") == []
    assert len(queue.send_event(INVOICE, {"invoice_id": 8}, dedupe_key="invoice-8")) == 2
    assert len(queue.send_event(INVOICE, {"invoice_id": 7})) == 2  # no key: no dedupe
    assert queue.count_jobs() == 6


def test_a_finished_job_frees_its_dedupe_key_for_the_next_send(
    queue: JobQueue, backend: Backend, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    (first,) = queue.send_event(INVOICE, dedupe_key="invoice-7")
    claim_one(backend, "sync-invoice").complete()
    (second,) = queue.send_event(INVOICE, dedupe_key="invoice-7")
    assert second != first


def test_senders_racing_with_one_dedupe_key_start_one_set_of_jobs(
    backend: Backend, clock: FakeClock, queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    declare(declared, "mail-invoice", INVOICE)
    queue.startup()
    queues = [queue] + [other_queue(backend, clock) for _ in range(3)]
    start = threading.Barrier(8)
    returned: list[str] = []
    lock = threading.Lock()

    def send(sender: JobQueue) -> None:
        start.wait(timeout=10)
        ids = sender.send_event(INVOICE, {"invoice_id": 7}, dedupe_key="invoice-7")
        with lock:
            returned.extend(ids)

    threads = [threading.Thread(target=send, args=(queues[n % 4],)) for n in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        for other in queues[1:]:
            other.shutdown(timeout=2)
    jobs = queue.list_jobs()
    assert Counter(job.type for job in jobs) == {"sync-invoice": 1, "mail-invoice": 1}
    assert sorted(returned) == sorted(job.id for job in jobs)  # each id returned once


def test_the_event_sink_gets_event_sent_with_the_event_and_the_job_ids(
    backend: Backend, clock: FakeClock, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    events: list[JobEvent] = []
    queue = JobQueue(backend, visibility_timeout=30, clock=clock)
    queue.add_event_sink(events.append, kinds={"event-sent"})
    try:
        ids = queue.send_event(INVOICE, {"invoice_id": 7})
        assert queue.send_event("billing/nobody") == []
    finally:
        queue.shutdown(timeout=2)
    assert [(e.kind, e.event, e.job_ids) for e in events] == [
        ("event-sent", INVOICE, tuple(ids)),
        ("event-sent", "billing/nobody", ()),
    ]


@pytest.mark.parametrize(
    ("event", "data", "key", "error"),
    [
        ("", None, None, ValueError),
        (7, None, None, TypeError),
        ("bad\nname", None, None, ValueError),
        (INVOICE, {"x": object()}, None, TypeError),
        (INVOICE, None, "", ValueError),
        (INVOICE, None, "k" * 1020, ValueError),  # the job's dedupe key would be too long
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    queue: JobQueue, declared: list[str], event: Any, data: Any, key: Any, error: type
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    with pytest.raises(error):
        queue.send_event(event, data, dedupe_key=key)
    assert queue.count_jobs() == 0


def test_on_event_is_checked_where_it_is_declared() -> None:
    with pytest.raises(ValueError, match="event"):
        durabl.job("bad-event", on_event="")
    with pytest.raises(TypeError, match="on_event"):
        durabl.job("bad-event", on_event=7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        durabl.job("bad-event", on_event=())
    assert registry.get("bad-event") is None


def test_a_send_one_subscribed_type_refuses_stores_no_job_of_any(
    queue: JobQueue, declared: list[str]
) -> None:
    declare(declared, "sync-invoice", INVOICE)
    declared.append("typed-invoice")
    durabl.job("typed-invoice", on_event=INVOICE, schema=dict[str, int])(lambda job, ctx: None)
    with pytest.raises(durabl.PayloadValidationError):
        queue.send_event(INVOICE, {"invoice_id": "seven"})
    assert queue.count_jobs() == 0
    assert len(queue.send_event(INVOICE, {"invoice_id": 7})) == 2
