"""Orchestration bodies that keep nondeterminism inside steps: the linter finds nothing.

Never imported: ``test_lint.py`` runs the linter over this file.
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import requests

from durabl import JobQueue, MemoryBackend, Orchestrator

orch = Orchestrator(JobQueue(MemoryBackend()))


def fetch_price(keys: Any, signal: Any) -> float:
    # A module-level step function: it runs inside the step, not on the control path.
    return float(requests.get("https://example.com/price", timeout=5).text)


@orch.define("restart-trial")
def restart_trial(job: Any, octx: Any) -> None:
    started = octx.now()
    order_id = octx.uuid("order")
    price = octx.step("price", fetch_price)
    jitter = octx.step("jitter", lambda keys, signal: random.random())
    stamp = octx.step("stamp", lambda keys, signal: datetime.now(timezone.utc))

    def charge(keys: Any, signal: Any) -> str:
        # A nested function passed to a step by name also runs inside the step.
        response = requests.post(
            "https://example.com/charge",
            json={"order": order_id, "price": price, "at": time.time()},
            headers={"Idempotency-Key": keys.idempotency_key},
            timeout=10,
        )
        return str(response.json()["id"])

    charge_id = octx.step("charge", charge)
    octx.step(name="audit", fn=lambda keys, signal: str(uuid.uuid4()))
    octx.log(f"{started} {order_id} {jitter} {stamp} {charge_id}")
    octx.log(f"traced at {time.time()}")  # durabl: ignore


def not_an_orchestration() -> float:
    # Plain code may read the clock: it is not registered with define().
    return time.time() + random.random()
