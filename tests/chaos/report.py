"""The campaign's table (docs/reliability.md): one row per store and fault."""

from __future__ import annotations

import statistics
from collections import defaultdict

from tests.chaos.campaign import Result

HEADER = (
    "| store | fault | runs | jobs | lost | doubled | re-runs | recovery median (max) "
    "| worker resumed, slowest | enqueue resumed, slowest "
    "| log lines / episode | tracebacks / episode |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
)


def _seconds(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} s ({max(values):.1f} s)"


def table(results: list[Result]) -> str:
    rows: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for result in results:
        rows[(result.store, result.fault)].append(result)
    lines = [HEADER]
    for (store, fault), runs in sorted(rows.items()):
        recoveries = [r.recovery for r in runs if r.recovery is not None]
        slowest = [
            max((s if s is not None else float("inf")) for s in r.recovery_by_worker.values())
            for r in runs
            if r.recovery_by_worker
        ]
        resumed = f"{max(slowest):.1f} s" if slowest else "-"
        enqueues = [r.enqueue_recovery for r in runs if r.enqueue_recovery is not None]
        enqueued = f"{max(enqueues):.1f} s" if enqueues else "-"
        lines.append(
            f"| {store} | {fault} | {len(runs)} | {sum(r.jobs for r in runs)} "
            f"| {sum(r.lost for r in runs)} | {sum(r.doubled for r in runs)} "
            f"| {sum(r.reruns for r in runs)} | {_seconds(recoveries)} | {resumed} | {enqueued} "
            f"| {statistics.mean(r.log_lines for r in runs):.0f} "
            f"| {statistics.mean(r.tracebacks for r in runs):.0f} |\n"
        )
    violations = sum(len(r.violations) for r in results)
    lines.append(f"\n{len(results)} runs, {violations} violations.\n")
    return "".join(lines)
