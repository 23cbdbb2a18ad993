"""A web process for the event tests: ``python -m tests.crash.event_proc --url U --dir D``.

It declares no job type (it never imported the workers' modules): the subscriptions it
starts jobs of come from the store. It opens its queue, writes ``ready`` to ``D/<pid>``,
waits for the file ``D/go``, sends one keyed event and writes the ids it got back as
JSON to ``D/<pid>.ids``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from durabl import JobQueue, backend_from_url

EVENT = "billing/invoice.sync"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    folder = Path(args.dir)
    queue = JobQueue(backend_from_url(args.url))
    queue.startup()
    queue.list_subscriptions()  # connected and read once: the send is all that is left
    (folder / str(os.getpid())).write_text("ready")
    pause = threading.Event()
    while not (folder / "go").exists():
        pause.wait(0.005)
    ids = queue.send_event(EVENT, {"invoice_id": 7}, dedupe_key="invoice-7")
    (folder / f"{os.getpid()}.ids").write_text(json.dumps(ids))
    queue.backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
