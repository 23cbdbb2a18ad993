"""The cost-per-job report: its rows (each with an expectation and, for ``--check``, a
budget), a report per store, and the Markdown table they print as."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field

from opcount import TERMINAL, Counts


# -- results ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One line of the table. ``budget`` (an upper bound) makes the row count for --check."""

    scenario: str
    metric: str
    expected: str
    measured: float
    verdict: str  # PASS, CHECK or INFO
    budget: float | None = None
    unit: str = ""

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.measured > self.budget

    def measured_text(self) -> str:
        if self.unit == "jobs/s":
            return f"{self.measured:.0f} jobs/s"
        return f"{self.measured:.2f}"


def budget_row(scenario: str, metric: str, expected: str, measured: float, budget: float) -> Row:
    verdict = "PASS" if measured <= budget else "CHECK"
    return Row(scenario, metric, f"{expected} (budget <= {budget:g})", measured, verdict, budget)


def range_row(
    scenario: str, metric: str, expected: str, measured: float, low: float, high: float
) -> Row:
    verdict = "PASS" if low <= measured <= high else "CHECK"
    return Row(scenario, metric, expected, measured, verdict)


def info_row(scenario: str, metric: str, expected: str, measured: float, unit: str = "") -> Row:
    return Row(scenario, metric, expected, measured, "INFO", unit=unit)


def terminal_rows(scenario: str, counts: Counts, jobs: int, batched: str) -> list[Row]:
    """Terminal writes per job, counted per update statement (a ``bulk_write`` of 20
    completions is 20), and how many commands carried them."""
    commands = counts.commands_of(TERMINAL)
    return [
        budget_row(
            scenario,
            "terminal writes/job",
            "1.0, per update statement",
            counts[TERMINAL] / jobs,
            1.05,
        ),
        info_row(
            scenario,
            "terminal-write commands/job",
            f"{batched}; {commands} in all",
            commands / jobs,
        ),
    ]


@dataclass
class Report:
    store: str
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    def add(self, scenario: str, counts: Counts, note: str = "") -> None:
        extra = f" ({note})" if note else ""
        self.details.append(f"{scenario}{extra}: {counts.raw_summary()}")


# -- output -------------------------------------------------------------------------------
HEADERS = ("scenario", "metric", "expected", "measured", "result")


def render_table(rows: list[Row]) -> str:
    cells = [
        (row.scenario, row.metric, row.expected, row.measured_text(), row.verdict) for row in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADERS)]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(HEADERS), rule, *(line(c) for c in cells)])


def command_line() -> str:
    """This run's command, with a ``--url`` value (it may carry a password) left out."""
    exe = sys.executable
    try:
        exe = os.path.relpath(exe)
    except ValueError:
        pass
    args: list[str] = []
    for arg in sys.argv:
        if args and args[-1] == "--url":
            args.append("<url>")
        else:
            args.append("--url=<url>" if arg.startswith("--url=") else arg)
    return shlex.join([exe, *args])


def print_report(report: Report) -> None:
    print(f"\n## {report.store}\n")
    print(render_table(report.rows))
    print("\nRaw operation counts (collection methods or server commands):")
    for detail in report.details:
        print(f"  {detail}")
