"""The shop's jobs. durabl_django imports this module because it is an installed app's
``jobs.py``; declaring starts nothing, so ``runserver`` imports it too and never runs a job.
``manage.py runworkers`` runs them.

- ``send-receipt``: a plain job (return completes it, an exception retries it).
- ``charge-card``: always fails, the way a declined card would; the view enqueues it with
  ``max_attempts=2``, so it ends in the admin's failed jobs, where you can retry it.
- ``fulfil-order``: an orchestration of two steps. A step's result is journaled on the
  job as soon as the step returns, so a retry after a crash skips the steps that finished.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import durabl_django
from durabl import Job, JobContext, OrchestrationContext

logger = logging.getLogger(__name__)


class CardDeclined(Exception):
    """What the example's payment provider says to every card."""


@durabl_django.job("send-receipt", concurrency=2, poll_interval=1)
def send_receipt(job: Job[Any], ctx: JobContext) -> None:
    order_id, email = job.data["order_id"], job.data["email"]
    # A real shop would call django.core.mail.send_mail() here.
    logger.info("receipt for order %s sent to %s", order_id, email)
    ctx.log(f"receipt sent to {email}")


@durabl_django.job("charge-card", poll_interval=1)
def charge_card(job: Job[Any], ctx: JobContext) -> None:
    order_id = job.data["order_id"]
    ctx.log(f"charging {job.data['amount']} for order {order_id}")
    raise CardDeclined(f"card declined for order {order_id} (the example declines every card)")


# -- an orchestration: two steps, each run once ------------------------------------------------
def _reference(prefix: str, idempotency_key: str) -> str:
    """What an idempotent API returns: the same answer for the same key."""
    return f"{prefix}-{hashlib.sha256(idempotency_key.encode()).hexdigest()[:8]}"


def reserve_stock(order_id: str, idempotency_key: str) -> str:
    logger.info("stock reserved for order %s", order_id)
    return _reference("RES", idempotency_key)


def book_shipment(order_id: str, reservation: str, idempotency_key: str) -> str:
    logger.info("shipment booked for order %s (reservation %s)", order_id, reservation)
    return _reference("TRK", idempotency_key)


@durabl_django.orchestration("fulfil-order", poll_interval=1, step_timeout=30)
def fulfil_order(job: Job[Any], octx: OrchestrationContext) -> None:
    order_id = job.data["order_id"]
    reservation = octx.step(
        "reserve-stock",
        lambda keys, signal: reserve_stock(order_id, keys.idempotency_key),
    )
    tracking = octx.step(
        "book-shipment",
        lambda keys, signal: book_shipment(order_id, reservation, keys.idempotency_key),
    )
    octx.log(f"order {order_id}: stock {reservation}, shipment {tracking}")
