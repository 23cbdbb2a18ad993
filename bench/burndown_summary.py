"""The burn-down's figures as Markdown tables, from ``bench/results/burndown-*.json``
(``bench/burndown.py summary``): the numbers docs/benchmarks.md quotes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MB = 1024 * 1024
ORDER = (
    "durabl-sqlite",
    "durabl-postgres",
    "durabl-postgres-vacuum",
    "durabl-postgres-av-default",
    "durabl-postgres-av-tuned",
    "durabl-postgres-av-naptime10",
    "durabl-postgres-av-naptime10-r2",
    "raw1",
    "raw32",
    "raw32-private",
    "procrastinate",
    "durabl-mongo",
)


def load_all(results: Path) -> list[dict[str, Any]]:
    runs = []
    for name in ORDER:
        path = results / f"burndown-{name}.json"
        if path.exists():
            runs.append(json.loads(path.read_text()))
    return runs


def _peak(run: dict[str, Any], key: str) -> float:
    return max(float(s["stats"].get(key) or 0) for s in run["slices"])


def throughput_table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| run | jobs | P x T | insert s | burn-down s | jobs/s | first tenth | last tenth "
        "| last / first | worker CPU ms/job | server CPU ms/job |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        s = r["sustained"]
        last = r["slices"][-1]
        lines.append(
            f"| {r['name']} | {r['jobs']:,} | {r['processes']} x {r['threads']} "
            f"| {r['insert_s']:.0f} | {r['seconds']:.1f} | {r['jobs_per_s']:,.0f} "
            f"| {s['first_tenth_jobs_per_s']:,.0f} | {s['last_tenth_jobs_per_s']:,.0f} "
            f"| {s['last_over_first']:.2f} | {1000 * last['worker_cpu_s'] / r['jobs']:.3f} "
            f"| {1000 * last['server_cpu_s'] / r['jobs']:.3f} |"
        )
    return "\n".join(lines)


def postgres_table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| run | heap MB start / peak / end | indexes MB start / peak / end | dead tuples peak "
        "/ end | row updates per job | HOT | rows left |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        first = r["slices"][0]["stats"]
        if "table_bytes" not in first:
            continue
        end = r["final_stats"]
        upd = end["updated"] / r["jobs"]
        hot = end["hot_updated"] / max(end["updated"], 1)
        lines.append(
            f"| {r['name']} | {first['table_bytes'] / MB:.0f} / {_peak(r, 'table_bytes') / MB:.0f}"
            f" / {end['table_bytes'] / MB:.0f} | {first['index_bytes'] / MB:.0f} / "
            f"{_peak(r, 'index_bytes') / MB:.0f} / {end['index_bytes'] / MB:.0f} | "
            f"{_peak(r, 'dead_tuples'):,.0f} / {end['dead_tuples']:,} | {upd:.2f} | "
            f"{100 * hot:.0f} % | {end.get('rows_left', end.get('live_tuples')):,} |"
        )
    return "\n".join(lines)


def summary(results: Path) -> str:
    runs = load_all(results)
    return throughput_table(runs) + "\n\n" + postgres_table(runs)
