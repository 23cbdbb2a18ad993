"""Orchestration bodies that read nondeterministic values on the control path.

Never imported: ``test_lint.py`` runs the linter over this file and expects a finding on
every line marked ``# expect: <dotted call>``.
"""

from __future__ import annotations

import os
import random as r
import secrets
import subprocess
import time
import urllib.request
import uuid
from datetime import date, datetime
from typing import Any
from uuid import uuid4 as make_id

import httpx
import requests

from durabl import JobQueue, MemoryBackend, Orchestrator

orch = Orchestrator(JobQueue(MemoryBackend()))


@orch.define("restart-trial")
def restart_trial(job: Any, octx: Any) -> None:
    started = time.time()  # expect: time.time
    if r.random() < 0.5:  # expect: random.random
        octx.log("heads")
    deadline = datetime.now()  # expect: datetime.datetime.now
    today = date.today()  # expect: datetime.date.today
    order_id = str(uuid.uuid4())  # expect: uuid.uuid4
    octx.step(
        "charge",
        lambda keys, signal: None,
        idempotency_key=make_id().hex,  # expect: uuid.uuid4
    )
    octx.sleep("wait", r.randint(1, 60))  # expect: random.randint
    octx.log(f"{started} {deadline} {today} {order_id}")


def provision(job: Any, octx: Any) -> None:
    token = secrets.token_hex(8)  # expect: secrets.token_hex
    with open("/etc/hostname") as f:  # expect: builtins.open
        host = f.read()
    body = requests.get("https://example.com").text  # expect: requests.get
    httpx.post("https://example.com", json={"t": token})  # expect: httpx.post
    urllib.request.urlopen("https://example.com")  # expect: urllib.request.urlopen
    subprocess.run(["true"], check=False)  # expect: subprocess.run
    noise = os.urandom(4)  # expect: os.urandom
    octx.log(f"{host} {body} {noise!r} {time.monotonic()}")  # expect: time.monotonic

    def helper() -> float:
        return time.time_ns()  # expect: time.time_ns

    octx.log(str(helper()))


orch.define("provision", provision, concurrency=2)
orch.define(
    "inline",
    lambda job, octx: octx.log(str(datetime.utcnow())),  # expect: datetime.datetime.utcnow
)
