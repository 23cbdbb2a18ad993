"""Same-run A/B: SQLite no-op throughput of two revisions of durabl, measured alternately.

Each revision is exported with ``git archive`` into a temporary directory (nothing is
installed; the current virtualenv's packages serve both). Then, for every round, each
revision runs the same measurement in a fresh child process, in alternating order, so that
whatever else the machine does weighs on both alike:

* N no-op jobs are enqueued into a fresh SQLite file, then ``process(..., concurrency=W)``
  runs them; **jobs/s** counts from the first handler start to the last handler end;
* **CPU µs/job** is the child's user + system CPU time over that same span, divided by N:
  far steadier than wall time on a shared machine, since it counts only this process's
  work (it is not a cycle count: frequency changes and cache pressure from neighbours
  still show).

Only the public API both revisions have is used (``JobQueue``, ``SqliteJobQueue``,
``enqueue``, ``process``, ``get_stats``, ``shutdown``). Medians are printed per revision
and worker count, with B relative to A.

Run: ``.venv/bin/python bench/ab_commits.py REV_A REV_B [--rounds 7] [--jobs 3000]
[--workers 1 4]``, e.g. ``bench/ab_commits.py HEAD~1 HEAD``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Runs in the child (``python -c``) with the revision's tree first on ``sys.path``.
MEASURE = r"""
import json, os, resource, sys, tempfile, threading, time
from durabl import JobQueue, SqliteJobQueue

jobs, workers = int(sys.argv[1]), int(sys.argv[2])

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

with tempfile.TemporaryDirectory() as tmp:
    queue = JobQueue(SqliteJobQueue(os.path.join(tmp, "ab.db")))
    queue.startup()
    for i in range(jobs):
        queue.enqueue("noop", {"i": i})
    lock = threading.Lock()
    done = threading.Event()
    marks = {"first": None, "last": None, "cpu0": None, "n": 0}

    def handler(job, ctx):
        now = time.perf_counter()
        with lock:
            if marks["first"] is None:
                marks["first"], marks["cpu0"] = now, cpu()
            marks["last"] = now
            marks["n"] += 1
            if marks["n"] == jobs:
                done.set()

    queue.process("noop", handler, concurrency=workers, poll_interval=0.05)
    if not done.wait(300):
        sys.exit("timed out")
    cpu1 = cpu()
    span = marks["last"] - marks["first"]
    queue.shutdown(timeout=30)
    print(json.dumps({"jobs_per_s": jobs / span, "cpu_us": (cpu1 - marks["cpu0"]) / jobs * 1e6}))
"""


def export(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (its ``durabl`` package) in ``into``."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = into / sha
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", sha, "durabl"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def measure(tree: Path, jobs: int, workers: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(jobs), str(workers)],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev_a")
    parser.add_argument("rev_b")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trees = [export(args.rev_a, Path(tmp)), export(args.rev_b, Path(tmp))]
        names = [t.name for t in trees]
        runs: dict[tuple[str, int], list[dict[str, float]]] = {}
        for r in range(args.rounds):
            for workers in args.workers:
                order = trees if r % 2 == 0 else trees[::-1]
                for tree in order:
                    runs.setdefault((tree.name, workers), []).append(
                        measure(tree, args.jobs, workers)
                    )
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"SQLite no-op, {args.jobs} jobs, {args.rounds} alternating rounds, medians")
    print(f"A = {names[0]} ({args.rev_a}), B = {names[1]} ({args.rev_b})")
    print(
        f"{'workers':>7} | {'A jobs/s':>9} | {'B jobs/s':>9} | {'B/A':>6} | "
        f"{'A CPU µs/job':>12} | {'B CPU µs/job':>12} | {'B/A':>6}"
    )
    for workers in args.workers:
        a = runs[(names[0], workers)]
        b = runs[(names[1], workers)]
        ta = statistics.median(x["jobs_per_s"] for x in a)
        tb = statistics.median(x["jobs_per_s"] for x in b)
        ca = statistics.median(x["cpu_us"] for x in a)
        cb = statistics.median(x["cpu_us"] for x in b)
        print(
            f"{workers:>7} | {ta:>9.0f} | {tb:>9.0f} | {tb / ta:>6.2f} | "
            f"{ca:>12.0f} | {cb:>12.0f} | {cb / ca:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
