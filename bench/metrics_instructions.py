"""What ``durabl.metrics`` and ``durabl.tracing`` cost per job, counted in CPU instructions.

``bench/metrics_cost.py`` times jobs/s, which moves by 10-30 % between rounds on a shared
two-core machine. This script counts instructions instead (valgrind's callgrind), which
repeats to within a fraction of a percent whatever else the machine does: for each setup
of ``metrics_cost.py`` (plain; metrics; metrics and tracing recording every span; the same
with a 10 % parent-based sampler; tracing with OpenTelemetry's API alone), a first
process enqueues the jobs through the instrumented queue, then a second one runs them
with ``queue.run_pending()`` (one thread, no completer: the serial cost of a run) under
callgrind. Two job counts are run; their difference divided by the difference in jobs is
the cost of one job, with the process's start-up left out.

Run: ``.venv/bin/python bench/metrics_instructions.py [--jobs 100 500]`` (needs
``valgrind``; about 25 s per setup).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from metrics_cost import SETUPS, instrument  # noqa: E402

from durabl import JobQueue, SqliteJobQueue  # noqa: E402


def child(mode: str, setup: str, path: str, jobs: int) -> None:
    queue = JobQueue(SqliteJobQueue(path))
    instrument(queue, setup)
    if mode == "fill":
        for _ in range(jobs):
            queue.enqueue("noop", {})
    else:
        queue.register("noop", lambda job, ctx: None)
        ran = queue.run_pending("noop")
        if ran != jobs:
            raise SystemExit(f"ran {ran} jobs, expected {jobs}")
    queue.shutdown(5)


def instructions(setup: str, jobs: int) -> int:
    """Instructions of a process that runs ``jobs`` stored no-op jobs."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "jobs.db")
        me = [sys.executable, __file__, "--child"]
        subprocess.run([*me, "fill", setup, path, str(jobs)], check=True)
        callgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        done = subprocess.run(
            [*callgrind, *me, "run", setup, path, str(jobs)],
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{done.stderr}")
    return int(found.group(1))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, setup, path, jobs = sys.argv[2:6]
        child(mode, setup, path, int(jobs))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs=2, default=[100, 500])
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing measured")
        return 1
    low, high = sorted(args.jobs)
    print(f"instructions per no-op job on SQLite, run_pending(), ({high} - {low} jobs)")
    plain = 0.0
    for setup in SETUPS:
        per_job = (instructions(setup, high) - instructions(setup, low)) / (high - low)
        plain = plain or per_job
        change = "" if setup == "plain" else f"  ({(per_job - plain) / plain:+.1%})"
        print(f"  {setup:<22} {per_job / 1e6:6.3f} M{change}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
