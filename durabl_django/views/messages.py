"""An orchestration's messages on its job's page: the signals its waits received and the
events its ``octx.send_event`` steps sent, with the jobs each started.

Read from the journal the job carries, so every store shows the same. A send journaled
by a durabl that did not yet name the event is not listed (its step is, among the steps);
signals sent to the job and not yet received are not either: durabl has no read for them.
"""

from __future__ import annotations

from typing import Any

from durabl import Job
from durabl.orchestrator import StepRecord
from durabl.orchestrator.journal import decode, received_signal
from durabl_django.admin_support import format_payload
from durabl_django.views.common import (
    LOG_AT,
    LOG_TEXT,
    NOWRAP,
    SIGNAL_PREFIX,
    Cell,
    admin_url,
    detail_table,
    format_time,
)

#: How much of a signal's data its cell shows (pretty-printed): enough to read a
#: decision's fields, short enough that one signal never fills the page.
SIGNAL_DATA_CHARS = 1_000
#: A data cell: JSON, in the payload's monospace font.
DATA = "durabl-data"


def _records(job: Job[Any]) -> list[StepRecord]:
    return decode(job.journal)[0] if job.journal else []


def signals_received(job: Job[Any], empty: str) -> dict[str, Any]:
    """One row per journaled signal wait that ended: its position, the wait step, the
    signal, its data, when it was sent and received; a wait whose timeout passed first
    says "timed out" instead of the data."""
    rows = []
    for record in _records(job):
        if record.kind != "signal":
            continue
        signal = received_signal(record)
        received = format_time(record.at) or empty
        if signal is None:
            css = "durabl-signal-received durabl-timed-out"
            outcome = [Cell("timed out", css=NOWRAP), Cell(empty, css=NOWRAP)]
        else:
            css = "durabl-signal-received"
            data = empty if signal.data is None else format_payload(signal.data, SIGNAL_DATA_CHARS)
            outcome = [
                Cell(data, css=f"{LOG_TEXT} {DATA}"),
                Cell(format_time(signal.sent_at), css=LOG_AT),
            ]
        cells = [
            Cell(str(record.seq), css=NOWRAP),
            Cell(record.name, css=LOG_TEXT),
            Cell(record.signal or empty, css=LOG_TEXT),
            *outcome,
            Cell(received, css=LOG_AT, title="" if signal else "when the wait ended without one"),
        ]
        rows.append({"css": css, "cells": cells})
    columns = ["#", "Wait step", "Signal", "Data", "Sent (UTC)", "Received (UTC)"]
    return detail_table(columns, rows)


def signals_empty(job: Job[Any]) -> str:
    """What the signals' module says without a row: a job that waits for a signal says it
    received none yet; for any other the module is left out."""
    waiting = job.waiting_for or ""
    return "No signal received yet." if waiting.startswith(SIGNAL_PREFIX) else ""


def events_sent(job: Job[Any], empty: str) -> dict[str, Any]:
    """One row per journaled ``send_event`` step: its position and name, the event, the
    jobs it started (each linked to its page) and when it was journaled."""
    rows = []
    for record in _records(job):
        if record.kind != "step" or record.event is None:
            continue
        started = [str(i) for i in record.result] if isinstance(record.result, list) else []
        # The failed list's page of each: it sends a job of another status to that
        # status's page, so a send of many jobs costs no read per job here.
        jobs = tuple((i, admin_url("job_detail", i)) for i in started)
        none = "" if jobs else "none (no type was subscribed)"
        cells = [
            Cell(str(record.seq), css=NOWRAP),
            Cell(record.name, css=LOG_TEXT),
            Cell(record.event, css=LOG_TEXT),
            Cell(none, jobs=jobs),
            Cell(format_time(record.at) or empty, css=LOG_AT),
        ]
        rows.append({"css": "durabl-event-sent", "cells": cells})
    return detail_table(["#", "Step", "Event", "Jobs started", "Sent (UTC)"], rows)
