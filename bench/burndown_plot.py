"""The burn-down's pictures, drawn from ``bench/results/burndown-*.json``:

* ``burndown-throughput.png``: durabl's jobs/s per slice over each run, one panel a store
  (PostgreSQL: with autovacuum on, and on the shared test server where it is off), the
  first and the last tenth's throughput in the legend;
* ``burndown-peers.png``: on PostgreSQL, durabl against Procrastinate and the raw
  ``SKIP LOCKED`` loops (x1, x32): overall jobs/s, and jobs/s across the backlog;
* ``burndown-vacuum.png``: durabl on PostgreSQL under five vacuum regimes (A-E, see
  docs/benchmarks.md): jobs/s and dead tuples over the run;
* ``burndown-sizes.png``: what the database weighs over the run (PostgreSQL: the job
  table's heap and index bytes under vacuum regimes A, B, C and E; SQLite: the file and
  its WAL).

Only the result files named here are drawn: a development run's (``--tag=-dev``) is not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STORES = (
    ("SQLite", (("durabl-sqlite", ""),)),
    (
        "PostgreSQL 15",
        (
            ("durabl-postgres-av-default", "autovacuum on (defaults): "),
            ("durabl-postgres", "the shared test server, autovacuum off: "),
        ),
    ),
    ("the MongoDB wire server: a Python server, relative only", (("durabl-mongo", ""),)),
)
PEERS = (
    ("durabl-postgres", "durabl", "#1f77b4"),
    ("procrastinate", "Procrastinate", "#ff7f0e"),
    ("raw1", "raw x1", "#7f7f7f"),
    ("raw32", "raw x32", "#2ca02c"),
)
VACUUM_RUNS = (
    ("durabl-postgres", "A: no vacuum (autovacuum off)", "#d62728"),
    ("durabl-postgres-vacuum", "B: VACUUM every 15 s", "#2ca02c"),
    ("durabl-postgres-av-default", "C: autovacuum defaults", "#ff7f0e"),
    ("durabl-postgres-av-tuned", "D: C + per-table settings", "#9467bd"),
    ("durabl-postgres-av-naptime10", "E: D + naptime 10 s", "#1f77b4"),
)
MB = 1024 * 1024


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"burndown-{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _slices(run: dict[str, Any]) -> tuple[list[float], list[float], list[float]]:
    """(time, rate, done) of each slice after the t=0 sample; the last one is left out
    when it is shorter than half a slice (the end is seen within 50 ms, and a rate over
    a few dozen ms is noise)."""
    rows = [s for s in run["slices"] if s["t"] > 0]
    if len(rows) > 2 and rows[-1]["t"] - rows[-2]["t"] < run["slice_s"] / 2:
        rows = rows[:-1]
    return [s["t"] for s in rows], [s["rate"] for s in rows], [s["done"] for s in rows]


def _subtitle(run: dict[str, Any] | None) -> str:
    assert run is not None
    return f"{run['processes']} processes x {run['threads']} threads"


def plot_all(results: Path, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    written = [
        _throughput(results, out / "burndown-throughput.png"),
        _peers(results, out / "burndown-peers.png"),
        _sizes(results, out / "burndown-sizes.png"),
        _vacuum(results, out / "burndown-vacuum.png"),
    ]
    return [p for p in written if p is not None]


def _throughput(results: Path, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    panels = []
    for title, names in STORES:
        runs = [(load(results, name), label) for name, label in names]
        runs = [(r, lab) for r, lab in runs if r is not None]
        if runs:
            panels.append((title, runs))
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.6 * len(panels)), squeeze=False)
    colors = ("#1f77b4", "#d62728")
    for ax, (title, runs) in zip(axes[:, 0], panels, strict=True):
        for (run, label), color in zip(runs, colors, strict=False):
            assert run is not None
            t, rate, _ = _slices(run)
            s = run["sustained"]
            first, last = s["first_tenth_jobs_per_s"], s["last_tenth_jobs_per_s"]
            summary = (
                f"{label}{run['jobs']:,} jobs, {run['jobs_per_s']:,.0f}/s overall; "
                f"first tenth {first:,.0f}/s, last tenth {last:,.0f}/s"
            )
            ax.plot(t, rate, color=color, linewidth=1.1, label=summary)
        ax.set_title(f"durabl on {title} ({_subtitle(runs[0][0])})", fontsize=10)
        ax.set_xlabel("seconds since the workers started")
        slice_s = runs[0][0]["slice_s"] if runs[0][0] else 2.0
        ax.set_ylabel(f"jobs completed / s (per {slice_s:g} s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left", fontsize=8)
    fig.suptitle("Burn-down: throughput over the run (retention 10 s)", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _peers(results: Path, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    runs = [(load(results, name), label, color) for name, label, color in PEERS]
    runs = [(r, lab, c) for r, lab, c in runs if r is not None]
    if not runs:
        return None
    fig, (bars, lines) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=(1, 1.6))
    labels = [f"{lab}\n({r['jobs']:,} jobs)" for r, lab, _ in runs if r]
    values = [r["jobs_per_s"] for r, _, _ in runs if r]
    drawn = bars.bar(labels, values, color=[c for _, _, c in runs])
    bars.bar_label(drawn, labels=[f"{v:,.0f}" for v in values], fontsize=9)
    raw32 = next((r for r, lab, _ in runs if r and lab.endswith("x32")), None)
    if raw32 is not None:
        half = raw32["jobs_per_s"] / 2
        bars.axhline(half, color="#2ca02c", linestyle="--", linewidth=1)
        bars.text(-0.4, half, f" 0.5x raw x32 = {half:,.0f}/s", va="bottom", fontsize=8)
    bars.set_ylabel("jobs/s, whole backlog")
    bars.set_title(
        "PostgreSQL (shared test server, autovacuum off),\n"
        "same harness, same P x T; raw: SKIP LOCKED loop",
        fontsize=10,
    )
    bars.tick_params(axis="x", labelsize=8)
    bars.grid(axis="y", alpha=0.3)
    for run, label, color in runs:
        assert run is not None
        _, rate, done = _slices(run)
        share = [100.0 * d / run["jobs"] for d in done]
        lines.plot(share, rate, color=color, linewidth=1.2, marker=".", markersize=3, label=label)
    lines.set_yscale("log")
    lines.set_xlabel("% of the backlog done")
    lines.set_ylabel(f"jobs/s per {runs[0][0]['slice_s'] if runs[0][0] else 2:g} s slice (log)")
    lines.set_title("Throughput across the backlog", fontsize=10)
    lines.grid(alpha=0.3, which="both")
    lines.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _sizes(results: Path, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    pg = load(results, "durabl-postgres")
    lite = load(results, "durabl-sqlite")
    panels = [p for p in (pg, lite) if p is not None]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.6), squeeze=False)
    col = 0
    if pg is not None:
        ax = axes[0, col]
        col += 1
        for name, tag, color in VACUUM_RUNS:
            run = load(results, name)
            if run is None or name == "durabl-postgres-av-tuned":  # D: as C, see the docs
                continue
            t = [s["t"] for s in run["slices"]]
            st = [s["stats"] for s in run["slices"]]
            heap = [x["table_bytes"] / MB for x in st]
            indexes = [x["index_bytes"] / MB for x in st]
            ax.plot(t, heap, "-", color=color, linewidth=1.3, label=f"{tag}: heap")
            ax.plot(t, indexes, "--", color=color, linewidth=1.1, label=f"{tag}: indexes")
        ax.set_ylabel("MB")
        ax.set_ylim(bottom=0)
        retention = pg["settings"].get("retention_s")
        ax.set_title(
            f"PostgreSQL job table ({pg['jobs']:,} jobs, retention {retention} s)", fontsize=10
        )
        ax.set_xlabel("seconds since the workers started")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if lite is not None:
        ax = axes[0, col]
        t = [s["t"] for s in lite["slices"]]
        st = [s["stats"] for s in lite["slices"]]
        ax.plot(t, [x["db_bytes"] / MB for x in st], color="#1f77b4", label="database file MB")
        ax.plot(t, [x["wal_bytes"] / MB for x in st], color="#ff7f0e", label="WAL file MB")
        retention = lite["settings"].get("retention_s")
        ax.set_title(f"SQLite file ({lite['jobs']:,} jobs, retention {retention} s)", fontsize=10)
        ax.set_xlabel("seconds since the workers started")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("What the database weighs during the burn-down", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _vacuum(results: Path, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    runs = [(load(results, name), label, color) for name, label, color in VACUUM_RUNS]
    runs = [(r, lab, c) for r, lab, c in runs if r is not None]
    if len(runs) < 2:
        return None
    fig, (rates, dead) = plt.subplots(1, 2, figsize=(14, 4.8))
    for run, label, color in runs:
        assert run is not None
        t, rate, _ = _slices(run)
        smooth = [
            sum(rate[max(0, i - 2) : i + 3]) / len(rate[max(0, i - 2) : i + 3])
            for i in range(len(rate))
        ]
        ratio = run["sustained"]["last_over_first"]
        summary = f"{label}: {run['jobs_per_s']:,.0f}/s, last/first {ratio:.2f}"
        rates.plot(t, smooth, color=color, linewidth=1.3, label=summary)
        st = [s["stats"] for s in run["slices"]]
        tt = [s["t"] for s in run["slices"]]
        dead.plot(
            tt, [x["dead_tuples"] / 1000 for x in st], color=color, linewidth=1.3, label=label
        )
    rates.set_title("jobs/s (10 s moving average)", fontsize=10)
    rates.set_xlabel("seconds since the workers started")
    rates.set_ylim(bottom=0)
    rates.grid(alpha=0.3)
    rates.legend(fontsize=8, loc="lower left")
    dead.set_title("dead tuples in the job table, thousands", fontsize=10)
    dead.set_xlabel("seconds since the workers started")
    dead.set_ylim(bottom=0)
    dead.grid(alpha=0.3)
    dead.legend(fontsize=8)
    first = runs[0][0]
    assert first is not None
    retention = first["settings"].get("retention_s")
    fig.suptitle(
        f"durabl on PostgreSQL, {first['jobs']:,} jobs, retention {retention} s:"
        " what vacuuming does to a long burn-down",
        fontsize=12,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
