"""``durabl show ID``: everything stored about one job, as lines to read (or ``--json``)."""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import fields
from typing import Any

from durabl.cli.common import (
    CommandError,
    Sub,
    opened,
    plain,
    print_json,
    print_table,
    store_parser,
    utc_text,
)
from durabl.model.job import Job

#: Printed under their name, indented, after the one-line fields.
LONG_FIELDS = ("data", "fail_reason", "result")
ATTEMPT_COLUMNS = ("#", "outcome", "started_at", "ended_at", "worker", "error")


def configure_show(sub: Sub) -> None:
    p = store_parser(
        sub,
        "show",
        "everything stored about one job",
        "Print one job: its fields, payload, failure reason, attempt history and logs. "
        "Exit 1 when there is no such job.",
        "durabl show 6650c3e2a1f0b2d4c8e9a001",
        "durabl show 6650c3e2a1f0b2d4c8e9a001 --json",
    )
    p.add_argument("job_id", metavar="ID")
    p.set_defaults(run=run_show)


def run_show(args: argparse.Namespace) -> int:
    with opened(args, read_only=True) as queue:
        job = queue.get_job(args.job_id)
    if job is None:
        raise CommandError(f"no job {args.job_id}")
    record = {f.name: getattr(job, f.name) for f in fields(job) if f.name != "journal"}
    record["waiting_for"] = job.waiting_for  # read from the journal, which is not shown
    if args.json:
        print_json(record)
        return 0
    for name, value in record.items():
        if name not in (*LONG_FIELDS, "logs", "attempt_history"):
            print(f"{name + ':':<18} {'-' if value is None else as_text(value)}")
    for name in LONG_FIELDS:
        value = record.get(name)
        if value is not None:
            print(f"{name}:")
            text = value if isinstance(value, str) else json.dumps(plain(value), indent=2)
            print(indented(text))
    if job.logs:  # one line each: when (UTC) and what
        print("logs:")
        print(indented("\n".join(f"{utc_text(e.at)}  {e.message}" for e in job.logs)))
    if job.attempt_history:
        print("attempt_history:")
        print(indented(attempts_table(job)))
    return 0


def as_text(value: Any) -> str:
    """A field's value on one line: text as it is, anything else as JSON."""
    data = plain(value)
    return data if isinstance(data, str) else json.dumps(data)


def indented(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def attempts_table(job: Job[Any]) -> str:
    rows = [
        {"#": a.number, **{f: getattr(a, f) for f in ATTEMPT_COLUMNS[1:]}}
        for a in job.attempt_history
    ]
    table = io.StringIO()
    print_table(rows, ATTEMPT_COLUMNS, out=table)
    return table.getvalue()
