"""``durabl signal JOB NAME [--data JSON]``: send a signal to a job (``queue.signal``), for
an operator approving a waiting orchestration by hand or a script standing in for a
webhook."""

from __future__ import annotations

import argparse
import json
from typing import Any

from durabl.cli.common import Sub, UsageError, opened, print_json, store_parser


def json_arg(text: str) -> Any:
    """A JSON value (``{"by": "ana"}``, ``7``, ``"yes"``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected JSON, got {text!r} ({exc.msg})") from None


def configure_signal(sub: Sub) -> None:
    p = store_parser(
        sub,
        "signal",
        "send a signal to a job (an orchestration's wait_for_signal takes it)",
        "Send the signal NAME with --data (JSON; default null) to job JOB: kept with the job "
        "until its orchestration waits for NAME, and a job already waiting for it is woken "
        'at once. --json prints {"signalled": true|false}. Exit 1 when the job is unknown '
        "or finished (nothing is stored).",
        "durabl signal 6650c3e2a1f0b2d4c8e9a001 approve",
        """durabl signal 6650c3e2a1f0b2d4c8e9a001 approve --data '{"by": "ana"}'""",
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--data", type=json_arg, default=None, metavar="JSON")
    p.set_defaults(run=run_signal)


def run_signal(args: argparse.Namespace) -> int:
    with opened(args) as queue:
        try:
            sent = queue.signal(args.job_id, args.name, args.data)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        print_json({"signalled": sent})
    elif sent:
        print(f"signalled {args.job_id}: {args.name}")
    else:
        print(f"not signalled: {args.job_id} is unknown or finished")
    return 0 if sent else 1
