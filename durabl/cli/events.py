"""``durabl events``: the event subscriptions recorded in the store (which job types each
event starts)."""

from __future__ import annotations

import argparse

from durabl.cli.common import Sub, opened, plain, print_json, print_table, store_parser


def configure_events(sub: Sub) -> None:
    p = store_parser(
        sub,
        "events",
        "the event subscriptions in the store: which job types each event starts",
        "List every event subscription recorded in the store, by event then job type: "
        "sending the event (queue.send_event) starts one job of each type listed for it. "
        "A queue records the on_event declarations of its process when it starts; "
        "queue.unsubscribe(type, event) removes one.",
        "durabl events",
        "durabl events --json",
    )
    p.set_defaults(run=run_events)


def run_events(args: argparse.Namespace) -> int:
    with opened(args, read_only=True) as queue:
        subscriptions = queue.list_subscriptions()
    rows = [plain(s) for s in subscriptions]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ("event", "type"))
    return 0
