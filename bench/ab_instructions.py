"""Same-run A/B in CPU instructions: what one no-op job costs on two revisions of durabl.

``bench/ab_commits.py`` times CPU per job, which moves by several percent on a shared
machine. This counts instructions with valgrind's callgrind instead, which repeats to a
fraction of a percent. Each revision is exported with ``git archive`` into a temporary
directory (the current virtualenv's packages serve both). For each store, a child process
under callgrind enqueues N jobs through ``queue.enqueue`` (one at a time), and another runs
them with ``queue.run_pending()`` (one thread, no completer: the serial cost of a run);
two job counts are run and their difference, divided by the difference in jobs, is the
cost of one job with the process's start-up left out.

Run: ``.venv/bin/python bench/ab_instructions.py REV_A REV_B [--stores sqlite postgres]
[--jobs 100 400]`` (needs ``valgrind``; PostgreSQL at ``DURABL_TEST_POSTGRES_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``, each run in a schema of its own, dropped
after). About a minute per store and revision.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get(
    "DURABL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)

# The child: one phase on one store, with only the public API both revisions have.
CHILD = """
import logging, sys
phase, store, n, where, url = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
logging.disable(logging.CRITICAL)
from durabl import JobQueue, PostgresJobQueue, SqliteJobQueue
if store == "sqlite":
    backend = SqliteJobQueue(where, change_check_interval=None)
else:
    backend = PostgresJobQueue(url, table=where + ".jobs", listen_notify=False)
queue = JobQueue(backend)
queue.startup()
if phase == "enqueue":
    for i in range(n):
        queue.enqueue("noop", {"i": i})
else:
    queue.register("noop", lambda job, ctx: None)
    ran = queue.run_pending("noop")
    assert ran == n, (ran, n)
backend.close()
"""


def export(revision: str, into: Path) -> None:
    """The tree of ``revision`` in ``into`` (nothing installed)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def instructions(tree: Path, script: Path, *args: str) -> int:
    """The instructions callgrind counts for one child run on ``tree``."""
    out = tree / f"callgrind.{uuid.uuid4().hex}"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    command += [sys.executable, str(script), *args]
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    out.unlink(missing_ok=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"child failed on {tree}:\n{done.stderr[-3000:]}")
    return int(found.group(1))


@contextmanager
def store_place(store: str, workdir: Path) -> Iterator[str]:
    """A fresh SQLite file, or a fresh PostgreSQL schema dropped afterwards."""
    if store == "sqlite":
        yield str(workdir / f"{uuid.uuid4().hex}.db")
        return
    import psycopg

    schema = f"ab_instructions_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def per_job(tree: Path, script: Path, store: str, counts: tuple[int, int]) -> tuple[float, float]:
    """Instructions per enqueue and per run on ``tree``."""
    totals = {}
    for n in counts:
        with store_place(store, tree) as where:
            args = (store, str(n), where, POSTGRES_URL)
            totals[n] = (
                instructions(tree, script, "enqueue", *args),
                instructions(tree, script, "run", *args),
            )
    low, high = counts
    span = high - low
    return (
        (totals[high][0] - totals[low][0]) / span,
        (totals[high][1] - totals[low][1]) / span,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev_a")
    parser.add_argument("rev_b")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--jobs", nargs=2, type=int, default=[100, 400])
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    low, high = sorted(args.jobs)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "child.py"
        script.write_text(CHILD)
        trees = {}
        for name in (args.rev_a, args.rev_b):
            trees[name] = Path(tmp) / f"tree-{len(trees)}"
            trees[name].mkdir()
            export(name, trees[name])
        print(f"instructions per job (callgrind), {high} - {low} jobs")
        print(f"{'store':<10} {'revision':<14} {'enqueue':>12} {'run':>12}")
        for store in args.stores:
            results = [per_job(trees[name], script, store, (low, high)) for name in trees]
            for name, (enqueue, run) in zip(trees, results, strict=True):
                print(f"{store:<10} {name[:14]:<14} {enqueue:>12,.0f} {run:>12,.0f}")
            (a_enqueue, a_run), (b_enqueue, b_run) = results
            change_enqueue = (b_enqueue / a_enqueue - 1) * 100
            change_run = (b_run / a_run - 1) * 100
            print(f"{store:<10} {'B vs A':<14} {change_enqueue:>+11.1f}% {change_run:>+11.1f}%")


if __name__ == "__main__":
    main()
