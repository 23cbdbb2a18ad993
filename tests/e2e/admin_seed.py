"""A queue with one of everything the admin shows, for the browser tests: long hyphenated
type names, a long type name and long dedupe keys with no space or hyphen to break at
(pending, failed and completed), a failure with a traceback, an orchestration with
replayed steps (and events sent, a signal received and a wait timed out), a running job
under a live worker, delayed, superseded and cancelled jobs, and two schedules."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from durabl import FatalJobError, JobQueue, Orchestrator
from durabl.testing import wait_until

WAIT = 15.0  # seconds any one thing the seed waits for may take
FAST: dict[str, Any] = {"poll_interval": 0.05, "heartbeat_interval": 0.2}
REPORT = "generate-monthly-invoice-report"
SHIPPED = "warehouse/order.shipped"
# A type name and dedupe keys with nowhere a browser may break a line (no space or
# hyphen): as an event-made key looks, "event:<event>:<key>:<type>".
LEDGER = "ledger.reconcile_outstanding_entries_for_every_subsidiary_v2"
PERIOD_CLOSED = "accounting/ledger.period_closed_for_every_subsidiary_and_currency"
DIGEST = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@dataclass
class Seeded:
    """The ids of the jobs a page of the admin is checked on."""

    failed: str  # a traceback, two attempts
    fatal: str  # one long line of reason
    # Completed in its second attempt, its first step replayed; it sent an event, received
    # a signal, and a wait of it timed out.
    orchestration: str
    failed_orchestration: str  # steps and a failure
    active: str  # running under a live worker until the queue shuts down
    pending: str  # delayed
    cancelled: str
    superseded: str
    long_key: str  # pending: a long type name and a long dedupe key an event made
    long_key_failed: str  # the same type, failed, with a long dedupe key of its own
    waiting: str  # an orchestration waiting for a signal that never comes


def _authorize(order: str) -> None:
    raise ValueError(f"card for order {order} declined by the issuer: insufficient funds")


def charge(job: Any, ctx: Any) -> None:
    ctx.log(f"charging order {job.data['order']} for {job.data['amount']} EUR")
    ctx.log("the payment provider answered 402 after 1.2 s")
    _authorize(job.data["order"])


def report(job: Any, ctx: Any) -> None:
    raise FatalJobError(
        "the invoice template 'monthly-summary-v2' references a column "
        "'customer_vat_number' that the accounting export no longer contains; "
        "update the template or restore the column before retrying"
    )


def ship(job: Any, octx: Any) -> None:
    octx.step("reserve stock in the Rotterdam warehouse", lambda keys, signal: "RES-1")
    if job.attempts == 1:
        raise RuntimeError("courier API offline (503)")
    if job.data.get("fail"):
        raise RuntimeError("no courier serves postcode 9999-ZZ")
    octx.send_event("announce the shipment", SHIPPED, {"order": job.data["order"]})
    octx.send_event("close the period", PERIOD_CLOSED, {"period": "2024-05"})
    octx.wait_for_signal("wait for the warehouse's confirmation", "warehouse.confirmed")
    octx.wait_for_signal("wait for a customs hold", "customs.hold", timeout=0)
    octx.step("book courier", lambda keys, signal: "TRK-1")


def reconcile(job: Any, ctx: Any) -> None:
    if job.data.get("fail"):
        raise FatalJobError(f"subsidiary {job.data['subsidiary']} has no ledger for {DIGEST}")


def syncer(store: JobQueue) -> Any:
    def sync(job: Any, ctx: Any) -> None:
        """The first run enqueues its follower and fails: the follower supersedes it."""
        if job.data.get("first"):
            store.enqueue(
                "sync-inventory", {"sku": "ABC"}, dedupe_key=job.dedupe_key, dedupe_scope="pending"
            )
            raise RuntimeError("stock feed changed while syncing")

    return sync


def seed(store: JobQueue) -> Seeded:
    """Fill ``store``; a worker of ``long-running-export`` keeps one job active until the
    queue shuts down (the caller's)."""
    store.register("charge-card", charge)
    store.register(REPORT, report)
    store.register("send-welcome-email", lambda job, ctx: None)
    store.register("notify-customer", lambda job, ctx: None, on_event=SHIPPED)
    store.register("sync-inventory", syncer(store))
    store.register(LEDGER, reconcile, on_event=PERIOD_CLOSED)
    orchestrator = Orchestrator(store)
    orchestrator.define("ship-order", ship, **FAST)
    fixed: dict[str, Any] = {"backoff": "fixed", "backoff_delay": 0}

    failed = ""
    for n in range(6):
        job_id = store.enqueue(
            "charge-card",
            {"order": f"A-{1000 + n}", "amount": 129.95},
            max_attempts=2,
            dedupe_key=f"charge:customer-{48213 + n}:order-A-{1000 + n}",
            **fixed,
        )
        failed = failed or str(job_id)
    fatal = store.enqueue(REPORT, {"month": "2024-05", "customers": "all"})
    for n in range(4):
        store.enqueue("send-welcome-email", {"to": f"user{n}@example.com"})
    orchestration = store.enqueue("ship-order", {"order": "B-2"}, max_attempts=2, **fixed)
    # For the second attempt's wait (the first fails before it): kept until the wait takes
    # it, or waking the wait if that came first.
    assert orchestration is not None and store.signal(
        orchestration,
        "warehouse.confirmed",
        {"dock": 4, "pallets": 12, "note": "two pallets re-wrapped after a forklift scrape"},
    )
    failed_orchestration = store.enqueue(
        "ship-order", {"order": "B-3", "fail": True}, max_attempts=2, **fixed
    )
    superseded = store.enqueue(
        "sync-inventory",
        {"sku": "ABC", "first": True},
        dedupe_key="sku:ABC",
        max_attempts=3,
        dedupe_scope="pending",
        **fixed,
    )
    long_key_failed = ""
    for subsidiary, fail in (("0042", True), ("0043", False)):  # failed, completed
        key = f"reconcile:subsidiary_{subsidiary}:period_2024_05:{DIGEST}"
        job_id = store.enqueue(LEDGER, {"subsidiary": subsidiary, "fail": fail}, dedupe_key=key)
        long_key_failed = long_key_failed or str(job_id)
    store.run_pending(LEDGER)
    for _ in range(4):
        store.run_pending("charge-card")
        store.run_pending(REPORT)
        store.run_pending("send-welcome-email")
        store.run_pending("sync-inventory")
    # Its second attempt waits for the warehouse's confirmation, which nobody sends.
    waiting = store.enqueue("ship-order", {"order": "B-4"}, max_attempts=2, **fixed)
    for job_id in (orchestration, failed_orchestration):
        assert job_id is not None
        store.wait(job_id, timeout=WAIT)
    assert waiting is not None and wait_until(
        lambda: store.get_job(waiting).waiting_for,  # type: ignore[union-attr]
        timeout=WAIT,
    )
    store.run_pending("notify-customer")  # the job the orchestration's event started

    pending = store.enqueue(REPORT, {"month": "2024-06"}, delay=3600, priority=5)
    store.enqueue("send-welcome-email", {"to": "late@example.com"}, delay=600)
    # Stays pending (no worker runs its type), as does the one the orchestration's event made.
    (long_key,) = store.send_event(PERIOD_CLOSED, {"period": "2024-06"}, dedupe_key=DIGEST[:32])
    cancelled = store.enqueue("send-welcome-email", {"to": "gone@example.com"}, delay=600)
    assert cancelled is not None and store.cancel(cancelled, "the customer closed the account")

    started = threading.Event()

    def export(job: Any, ctx: Any) -> None:
        started.set()
        ctx.log("exporting 1,204,331 rows to s3://exports/2024-05/")
        ctx.signal.wait(WAIT * 8)  # until the queue shuts down

    store.process("long-running-export", export, **FAST)
    active = store.enqueue("long-running-export", {"table": "invoices"})
    assert active is not None and started.wait(WAIT)

    store.schedule(
        "nightly-invoice-report-for-every-customer",
        REPORT,
        cron="0 3 * * *",
        timezone="Europe/Amsterdam",
    )
    store.schedule("welcome-email-digest", "send-welcome-email", every=300)
    store.scheduler.run_once(datetime.now(timezone.utc) + timedelta(seconds=301))

    ids = (failed, fatal, orchestration, failed_orchestration, active, pending, cancelled)
    ids += (long_key, long_key_failed)
    assert all(ids), ids
    return Seeded(
        failed=failed,
        fatal=str(fatal),
        orchestration=str(orchestration),
        failed_orchestration=str(failed_orchestration),
        active=str(active),
        pending=str(pending),
        cancelled=str(cancelled),
        superseded=str(superseded),
        long_key=long_key,
        long_key_failed=long_key_failed,
        waiting=waiting,
    )
