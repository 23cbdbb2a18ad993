"""AppConfig.ready() configures the queue but connects nothing and starts no thread."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.django.conftest import ROOT, django_env

PROBE = """
import json, threading, time
before = {t.name for t in threading.enumerate()}
started = time.monotonic()
import django
django.setup()
from django.core.management import call_command
import durabl, durabl_django
queue = durabl_django.get_queue()
same = queue is durabl.get_default_queue()
call_command("check", verbosity=0)  # the checks build a backend too, and connect nothing
print(json.dumps({
    "seconds": time.monotonic() - started,
    "new_threads": sorted({t.name for t in threading.enumerate()} - before),
    "backend": repr(queue.backend),
    "same": same,
}))
"""


def test_setup_with_an_unreachable_mongodb_neither_blocks_nor_starts_threads() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
        env=django_env(DURABL_TEST_URL="mongodb://127.0.0.1:1/app"),  # nothing listens there
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["new_threads"] == []
    assert report["seconds"] < 10  # server selection alone would take 30 s
    assert "MongoJobQueue" in report["backend"]
    assert report["same"] is True
