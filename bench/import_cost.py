"""What importing durabl costs: ``import durabl`` and the first uses an application makes.

Each scenario runs in a fresh interpreter with ``-X importtime``, ``--runs`` times; the
script reports the median of the time spent importing modules that the bare interpreter
had not already loaded (so Python's own start-up is left out, and so is the
``site``-time work of the virtualenv). Bytecode caches are written first by one warm-up run
of every scenario: a user's installed package has its ``.pyc`` files, so compiling from
source (what ``PYTHONDONTWRITEBYTECODE=1`` forces on every run) is not what they pay.

The standard-library row is the modules the runtime needs (threading, logging,
dataclasses, ...) imported alone: the floor under any queue written in Python on them.

Run: ``.venv/bin/python bench/import_cost.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCENARIOS: list[tuple[str, str]] = [
    ("import durabl", "import durabl"),
    (
        "declare a job type (@durabl.job)",
        "import durabl\n@durabl.job('bench')\ndef handler(job, ctx): pass",
    ),
    ("a queue in memory", "import durabl\ndurabl.JobQueue(durabl.MemoryBackend())"),
    ("the SQLite store", "import durabl\ndurabl.SqliteJobQueue"),
    (
        "standard library the runtime uses",
        "import typing, dataclasses, logging, threading, datetime, json, uuid, re, enum,"
        " inspect, socket, urllib.parse, functools, collections, heapq, random, platform",
    ),
]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(ROOT)
    return env


def _loaded_by_startup(env: dict[str, str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print(' '.join(sys.modules))"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(done.stdout.split())


def import_ms(code: str, env: dict[str, str], startup: set[str]) -> float:
    """Milliseconds spent importing top-level modules not loaded at start-up."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    total_us = 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        # A top-level entry has exactly one space before its name; nested ones are
        # indented further and already counted in their parent's cumulative time.
        if name.startswith("  ") or name.strip() in startup:
            continue
        total_us += int(cumulative)
    return total_us / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    env = _environment()
    startup = _loaded_by_startup(env)
    for _, code in SCENARIOS:
        import_ms(code, env, startup)
    python = sys.version.split()[0]
    print(f"import cost, median of {args.runs} fresh interpreters (Python {python})")
    for label, code in SCENARIOS:
        times = [import_ms(code, env, startup) for _ in range(args.runs)]
        low, high = min(times), max(times)
        median = statistics.median(times)
        print(f"  {label:<38} {median:7.1f} ms   (min {low:.1f}, max {high:.1f})")


if __name__ == "__main__":
    main()
