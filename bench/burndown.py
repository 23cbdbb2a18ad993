"""A backlog of N jobs, burned down start to finish: throughput over time, the database's
size over time, and the peers and the raw ceiling on PostgreSQL, through one harness.

    .venv/bin/python bench/burndown.py run --stores sqlite,postgres --jobs 1000000
    .venv/bin/python bench/burndown.py run --stores none --jobs 0 \
        --peers raw1,raw32,procrastinate --peer-jobs raw1=100000,raw32=600000,procrastinate=30000
    .venv/bin/python bench/burndown.py run --stores mongo --mongo-jobs 500
    .venv/bin/python bench/burndown.py plot      # bench/results/burndown-*.json -> docs/img/

``run`` stores the backlog first (``queue.enqueue_many``; see ``burndown_durabl``), then
starts ``--processes`` worker processes of ``--threads`` threads each and samples every
``--slice`` seconds: jobs done, the database's sizes (on PostgreSQL the job table's
live and dead tuples, table and index bytes, autovacuum runs) and the CPU the workers
and the server used. durabl runs with ``JobQueue(retention=--retention)`` and the reaper
every ``--reaper-interval`` seconds in process 0. Each contender's result goes to
``bench/results/burndown-<contender>.json``; ``plot`` draws every result there.

``profile -- run ...`` runs ``run`` under ``py-spy record --subprocesses`` (py-spy cannot
attach to a running process here, but can follow its own children) and keeps the top
costs of the worker processes in ``bench/results/burndown-profile-<tag>.json``.

PostgreSQL runs in throwaway schemas, dropped after; MongoDB runs on a SecantusDB wire
server (a Python server: its figures are relative only).
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

from burndown_harness import BurnResult, burn  # noqa: E402

RESULTS = BENCH / "results"
PEERS = ("raw1", "raw32", "procrastinate")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM ends the run through its ``finally`` blocks: the workers are stopped, the
    throwaway schema dropped, the wire server ended (a background job ignores SIGINT)."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = _parser().parse_args(argv)
    if args.command == "plot":
        from burndown_plot import plot_all

        for path in plot_all(RESULTS, Path(args.out)):
            print(f"wrote {path}")
        return 0
    if args.command == "summary":
        from burndown_summary import summary

        print(summary(RESULTS))
        return 0
    if args.command == "profile":
        from burndown_profile import profile_run

        return profile_run(Path(__file__), args.run_args, RESULTS)
    return run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="insert the backlog and burn it down")
    r.add_argument("--stores", default="sqlite,postgres", help="sqlite,postgres,mongo")
    r.add_argument("--jobs", type=int, default=1_000_000, help="backlog on SQLite/PostgreSQL")
    r.add_argument("--mongo-jobs", type=int, default=500, help="backlog on the wire server")
    r.add_argument("--peers", default="", help="on PostgreSQL: raw1,raw32,procrastinate")
    r.add_argument(
        "--peer-jobs",
        default="100000",
        help="backlog per peer: one number, or raw1=N,raw32=N,procrastinate=N",
    )
    r.add_argument("--processes", type=int, default=2, help="worker processes (P)")
    r.add_argument("--threads", type=int, default=8, help="threads per process (T)")
    r.add_argument("--slice", type=float, default=2.0, help="seconds per sample")
    r.add_argument("--retention", type=float, default=10.0, help="durabl: seconds kept")
    r.add_argument("--reaper-interval", type=float, default=5.0, help="durabl: reaper period")
    r.add_argument("--timeout", type=float, default=1800.0, help="seconds per burn-down")
    r.add_argument(
        "--pg-table-options",
        default="",
        help="ALTER TABLE <jobs> SET (...) on PostgreSQL, e.g. autovacuum_vacuum_scale_factor=0.01",
    )
    r.add_argument(
        "--pg-vacuum-every",
        type=float,
        default=0.0,
        help="PostgreSQL: the harness VACUUMs the job table every S seconds (0: never)",
    )
    r.add_argument("--tag", default="", help="suffix for the result files (dev runs)")
    f = sub.add_parser("profile", help="run under py-spy --subprocesses, then summarise")
    f.add_argument("run_args", nargs=argparse.REMAINDER, help="arguments for run")
    sub.add_parser("summary", help="print the results as Markdown tables")
    p = sub.add_parser("plot", help="draw docs/img/burndown-*.png from bench/results/")
    p.add_argument("--out", default=str(BENCH.parent / "docs" / "img"))
    return parser


def run(args: argparse.Namespace) -> int:
    from burndown_durabl import MongoRun, PostgresRun, SqliteRun, durabl_worker, wire_server
    from peers.pg import POSTGRES_URL

    stores = [s for s in args.stores.split(",") if s]
    peers = [p for p in args.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        raise SystemExit(f"unknown peers: {sorted(unknown)}")
    RESULTS.mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="durabl-burndown-"))
    for store in stores:
        jobs = args.mongo_jobs if store == "mongo" else args.jobs
        if jobs <= 0:
            continue
        if store == "sqlite":
            _contend(f"durabl-sqlite{args.tag}", SqliteRun(workdir), durabl_worker, jobs, args)
        elif store == "postgres":
            _contend(
                f"durabl-postgres{args.tag}",
                PostgresRun(POSTGRES_URL, args.pg_table_options, args.pg_vacuum_every),
                durabl_worker,
                jobs,
                args,
            )
        elif store == "mongo":
            with wire_server() as (url, pid):
                _contend(f"durabl-mongo{args.tag}", MongoRun(url, pid), durabl_worker, jobs, args)
        else:
            raise SystemExit(f"unknown store {store!r}")
    if peers:
        from burndown_peers import PeerRun

        for peer in peers:
            target = (
                PeerRun("raw", POSTGRES_URL, 1 if peer == "raw1" else 32)
                if peer.startswith("raw")
                else PeerRun("procrastinate", POSTGRES_URL)
            )
            jobs = _peer_jobs(args.peer_jobs, peer)
            _contend(f"{peer}{args.tag}", target, target.worker(), jobs, args)
    return 0


def _peer_jobs(given: str, peer: str) -> int:
    if "=" not in given:
        return int(given)
    sizes = dict(part.split("=", 1) for part in given.split(","))
    return int(sizes.get(peer, 100_000))


def _contend(
    name: str, target: Any, worker: Any, jobs: int, args: argparse.Namespace
) -> BurnResult:
    """Insert, burn down, record, clean up: one contender."""
    spec = {
        **target.spec,
        "retention": args.retention,
        "reaper_interval": args.reaper_interval,
    }
    try:
        print(f"{name}: inserting {jobs:,} jobs ...", flush=True)
        insert_s = target.insert(jobs)
        print(f"{name}: inserted in {insert_s:.1f} s ({jobs / insert_s:,.0f}/s)", flush=True)

        done = target.done_query() if hasattr(target, "done_query") else None
        if hasattr(target, "start_vacuuming"):
            target.start_vacuuming()
        result = burn(
            name,
            worker,
            spec,
            jobs=jobs,
            processes=args.processes,
            threads=args.threads,
            slice_s=args.slice,
            sample=target.sample,
            timeout=args.timeout,
            done=done,
            server_root=target.server_root(),
        )
        result.insert_s = insert_s
        result.insert_method = target.insert_method
        result.final_stats = target.final()
        result.settings = {
            **target.settings(),
            "store": target.store,
            "retention_s": args.retention if name.startswith("durabl") else None,
            "reaper_interval_s": args.reaper_interval if name.startswith("durabl") else None,
        }
    finally:
        target.cleanup()
    _report(result)
    _save(result)
    return result


def _report(result: BurnResult) -> None:
    s = result.sustained()
    last = result.slices[-1]
    per_k = 1000.0 / result.jobs
    print(
        f"{result.name}: {result.jobs:,} jobs in {result.seconds:.1f} s = "
        f"{result.jobs_per_s:,.0f} jobs/s; first tenth {s['first_tenth_jobs_per_s']:,.0f}/s, "
        f"last tenth {s['last_tenth_jobs_per_s']:,.0f}/s ({s['last_over_first']:.2f}x); "
        f"CPU s per 1000 jobs: workers {last.worker_cpu_s * per_k:.3f}, "
        f"server {last.server_cpu_s * per_k:.3f}",
        flush=True,
    )
    print(f"{result.name}: final {result.final_stats}", flush=True)


def _save(result: BurnResult) -> Path:
    data = asdict(result)
    data["sustained"] = result.sustained()
    data["machine"] = machine()
    data["when"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    path = RESULTS / f"burndown-{result.name}.json"
    path.write_text(json.dumps(_rounded(data), default=str) + "\n")  # one line: small files
    print(f"{result.name}: saved {path.relative_to(BENCH.parent)}", flush=True)
    return path


def _rounded(value: Any) -> Any:
    """Floats to 3 decimals (milliseconds, a thousandth of a job/s): smaller files."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def machine() -> dict[str, Any]:
    import os
    from importlib.metadata import version

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for package in ("durabl", "psycopg", "pymongo", "procrastinate"):
        try:
            versions[package] = version(package)
        except Exception:  # not installed
            versions[package] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": __import__("sqlite3").sqlite_version,
        "platform": platform.platform(),
        "loadavg_at_save": os.getloadavg(),
        **versions,
        "time": time.time(),
    }


if __name__ == "__main__":
    raise SystemExit(main())
