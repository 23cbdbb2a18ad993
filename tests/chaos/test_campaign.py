"""The fault campaign (docs/reliability.md).

Short (every run of ``pytest``): every fault once, on the stores it applies to, a small
workload each; no acknowledged job lost or completed twice, every invariant of
:mod:`tests.chaos.checker` kept, and every worker alive through the fault completing jobs
again within :data:`RECOVERY_BOUND`.

Long (``DURABL_CHAOS_MINUTES=30``, ``make chaos``): random (store, fault) runs until the
time is up, each with its own seed, printed and kept in the results; a failed run replays
with ``DURABL_CHAOS_REPLAY=store:fault:seed``; ``DURABL_CHAOS_FAULTS=db-outage,db-kill``
draws from those faults only. ``DURABL_CHAOS_DIR`` keeps every run's
files (histories, worker logs, the jobs as stored) and the results (``results.json``,
``table.md``); a file ``STOP`` created there ends the campaign after the current run.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.campaign import Config, Result, execute, results_directory, write_results
from tests.chaos.conftest import RESULTS
from tests.chaos.faults import FAULTS
from tests.chaos.report import table
from tests.chaos.stores import Store, Unavailable, open_store

pytestmark = pytest.mark.chaos

#: Seconds from a fault's end until every surviving worker completed a job again. Generous:
#: known defects (PostgreSQL's pool reconnect backoff, the MongoDB monitor's stall after a
#: state-change error) are being fixed elsewhere; a worker that never resumes fails anyway.
RECOVERY_BOUND = 30.0

#: Every fault once (those on one worker on SQLite; the three state-change answers of
#: the wire server in one run), to stay within about 3 minutes on a 2-core machine.
SHORT = [
    ("sqlite", "sigkill-worker"),
    ("sqlite", "sigstop-worker"),
    ("postgres", "db-restart-fast"),
    ("postgres", "db-restart-immediate"),
    ("postgres", "db-kill"),
    ("postgres", "pg-terminate-backend"),
    ("postgres", "partition"),
    ("pgbouncer", "pgbouncer-restart"),
    ("pgbouncer", "db-restart-fast"),
    ("mongodb", "wire-restart"),
    ("mongodb", "wire-kill"),
    ("mongodb", "fail-closeConnection"),
    ("mongodb", "fail-state-change"),  # 91, 10107, 11600 in turn
]


def config(store: str, fault: str, seed: int, *, long: bool = False) -> Config:
    """The workload: the wire server (a Python server) takes a few jobs a second; the
    long campaign runs more threads and a longer tail."""
    if long:
        rate = 5.0 if store == "mongodb" else 20.0
        return Config(store, fault, seed, rate=rate, threads=4, lead=1.5, tail=6.0, fail_for=3.0)
    return Config(store, fault, seed, rate=4.0 if store == "mongodb" else 10.0)


def store_for(servers: dict[str, Any], store: str, fault: str) -> Store:
    """The store's server, or a skip saying why there is none here."""
    try:
        opened = open_store(store, servers)
    except Unavailable as exc:
        pytest.skip(f"{store}: {exc}")
    missing = FAULTS[fault].needs(opened)
    if missing:
        pytest.skip(f"{fault}: {missing}")
    return opened


def verdict(result: Result) -> list[str]:
    """What is wrong with a run: its violations, then a slow or missing recovery."""
    wrong = list(result.violations)
    for pid, seconds in result.recovery_by_worker.items():
        if seconds is None:
            wrong.append(f"worker {pid} completed nothing after the fault ended")
        elif seconds > RECOVERY_BOUND:
            wrong.append(f"worker {pid} took {seconds:.1f} s to complete a job after the fault")
    return wrong


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("store", "fault"), SHORT, ids=[f"{s}-{f}" for s, f in SHORT])
def test_short_campaign(servers: dict[str, Any], store: str, fault: str, tmp_path: Path) -> None:
    opened = store_for(servers, store, fault)
    base = Path(os.environ["DURABL_CHAOS_DIR"]) if os.environ.get("DURABL_CHAOS_DIR") else tmp_path
    result = execute(config(store, fault, seed=1), opened, base / f"{store}-{fault}")
    RESULTS.append(result)
    write_results([result], base / f"{store}-{fault}" / "result.json")
    wrong = verdict(result)
    assert not wrong, f"{result.summary()}\n" + "\n".join(wrong[:20])


def _minutes() -> float:
    return float(os.environ.get("DURABL_CHAOS_MINUTES") or 0)


@pytest.mark.timeout(int(_minutes() * 60) + 900)
@pytest.mark.skipif(
    not (_minutes() or os.environ.get("DURABL_CHAOS_REPLAY")),
    reason="the long campaign: set DURABL_CHAOS_MINUTES (make chaos) or DURABL_CHAOS_REPLAY",
)
def test_long_campaign(servers: dict[str, Any]) -> None:
    directory = results_directory()
    replay = os.environ.get("DURABL_CHAOS_REPLAY")
    seed = int(os.environ.get("DURABL_CHAOS_SEED") or random.randrange(1, 1_000_000))
    print(f"\nfault campaign: seed {seed}, files in {directory}", flush=True)
    rng = random.Random(seed)
    plan = [(s, f) for s, f in _pairs() if _usable(servers, s, f)]
    deadline = time.monotonic() + _minutes() * 60
    results: list[Result] = []
    failed: list[str] = []
    n = 0
    while replay or (time.monotonic() < deadline and not (directory / "STOP").exists()):
        if replay:
            store, fault, run_seed = (
                replay.split(":")[0],
                replay.split(":")[1],
                int(replay.split(":")[2]),
            )
        else:
            store, fault = rng.choice(plan)
            run_seed = rng.randrange(1, 1_000_000)
        result = execute(
            config(store, fault, run_seed, long=True),
            open_store(store, servers),
            directory / f"{n:03d}-{store}-{fault}-{run_seed}",
        )
        n += 1
        results.append(result)
        RESULTS.append(result)
        print(
            f"{result.summary()}  replay: DURABL_CHAOS_REPLAY={store}:{fault}:{run_seed}",
            flush=True,
        )
        wrong = verdict(result)
        if wrong:
            failed.append(f"{result.summary()}: {wrong[:5]}")
        write_results(results, directory / "results.json")
        (directory / "table.md").write_text(table(results))
        if replay:
            break
    assert not failed, "\n".join(failed)


def _pairs() -> list[tuple[str, str]]:
    """Every (store, fault), or those of ``DURABL_CHAOS_FAULTS`` (names, comma-separated)."""
    chosen = {f for f in os.environ.get("DURABL_CHAOS_FAULTS", "").split(",") if f}
    unknown = chosen - set(FAULTS)
    if unknown:
        raise ValueError(f"DURABL_CHAOS_FAULTS: unknown {sorted(unknown)}; known {sorted(FAULTS)}")
    return [
        (store, kind.name)
        for kind in FAULTS.values()
        for store in kind.stores
        if not chosen or kind.name in chosen
    ]


def _usable(servers: dict[str, Any], store: str, fault: str) -> bool:
    try:
        opened = open_store(store, servers)
    except Unavailable as exc:
        print(f"fault campaign: {store} skipped: {exc}", flush=True)
        return False
    return FAULTS[fault].needs(opened) is None
