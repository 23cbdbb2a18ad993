"""What ``durabl`` promises in its ``--help`` and docs: usage errors exit 2 with the
command's own usage, ``--json`` wherever it is offered, lists that say when they are cut
short, messages that say what is wrong, and times that say their zone."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, NonRetryable, backend_from_url
from durabl.cli import build_parser, main

#: Commands with ``--url`` that take no ``--json``: the worker runs until stopped, the demo
#: prints its own report.
NO_JSON = {"worker", "demo"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite store with five pending jobs of type "a" and one failed job of "f" that
    logged a line."""
    store_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    queue = JobQueue(backend_from_url(store_url))
    for i in range(5):
        queue.enqueue("a", {"i": i})
    queue.enqueue("f", {})

    def fail(job: Any, ctx: Any) -> None:
        ctx.log("about to fail")
        raise NonRetryable("boom")

    queue.register("f", fail)
    queue.run_pending("f")
    queue.backend.close()
    return store_url


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


@pytest.mark.parametrize(
    "argv",
    [["retry"], ["retry", "some-id", "--all"], ["retry", "some-id", "--type", "a"]],
    ids=["neither", "both", "filter-without-all"],
)
def test_retry_usage_errors_exit_2(
    argv: list[str], url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv, "--url", url)
    assert (code, out) == (2, "")
    assert err.startswith("durabl retry: error: ") and len(err.splitlines()) == 1


def test_every_store_command_but_the_worker_and_demo_takes_json() -> None:
    top = build_parser().format_help()
    assert "--json" in top and "worker" in top  # the promise, and its exception
    for name, parser in subcommands().items():
        options = {o for a in parser._actions for o in a.option_strings}
        if "--url" in options and name not in NO_JSON:
            assert "--json" in options, name


def test_migrate_and_reap_print_json(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "migrate", "--check", "--json", "--url", url)
    checked = json.loads(out)
    assert code == 0 and checked["pending"] is False and checked["check"] is True
    assert checked["before"] == checked["after"] == checked["latest"]
    code, out, _ = run(capsys, "migrate", "--json", "--url", url)
    assert code == 0 and json.loads(out)["pending"] is False
    code, out, _ = run(capsys, "reap", "--json", "--url", url)
    assert code == 0
    assert json.loads(out) == {
        "reaped": 0,
        "recovered": 0,
        "stalled": 0,
        "superseded": 0,
        "visibility_timeout": 300.0,
    }


def test_an_unknown_option_prints_the_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "stats", "--bogus", "--url", "sqlite:///x.db")
    assert (code, out) == (2, "")
    assert err.startswith("usage: durabl stats ")
    assert err.splitlines()[-1] == "durabl stats: error: unrecognized arguments: --bogus"


def test_jobs_says_how_many_it_left_out_and_how_to_see_them(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "jobs", "--type", "a", "--limit", "2", "--url", url)
    assert code == 0
    assert out.splitlines()[-1] == "(2 of 5 jobs shown; --limit 5 shows them all)"
    code, out, err = run(capsys, "jobs", "--type", "a", "--limit", "2", "--json", "--url", url)
    assert code == 0 and len(json.loads(out)) == 2  # the JSON stays a list
    assert "2 of 5 jobs shown" in err
    code, out, err = run(capsys, "jobs", "--type", "a", "--limit", "5", "--url", url)
    assert "shown" not in out + err


def test_prune_older_than_zero_says_it_must_be_positive(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "prune", "--older-than", "0", "--url", url)
    assert code == 2
    assert "--older-than: must be positive, got '0'" in err
    code, _, err = run(capsys, "prune", "--older-than", "soon", "--url", url)
    assert code == 2 and "expected a duration such as 7d" in err


def test_show_prints_logs_and_attempts_as_lines_not_python_dicts(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(capsys, "jobs", "--status", "failed", "--json", "--url", url)
    job_id = json.loads(out)[0]["id"]
    code, out, _ = run(capsys, "show", job_id, "--url", url)
    assert code == 0
    assert "{'" not in out and "'}" not in out
    lines = out.splitlines()
    log_line = lines[lines.index("logs:") + 1]
    assert log_line.endswith(" UTC  about to fail")
    history = lines[lines.index("attempt_history:") + 1 :]
    assert history[0].split()[:2] == ["#", "OUTCOME"]
    assert history[1].split()[:2] == ["1", "failed"] and "NonRetryable: boom" in history[1]


def test_schedules_and_jobs_say_their_times_are_utc(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = JobQueue(backend_from_url(url))
    queue.schedule("nightly", "report", cron="0 2 * * *", timezone="Europe/Paris")
    queue.backend.close()
    _, out, _ = run(capsys, "schedules", "--url", url)
    row = out.splitlines()[1]
    assert "Europe/Paris" in row and row.count(" UTC") == 1  # next tick; no last one yet
    _, out, _ = run(capsys, "jobs", "--type", "a", "--url", url)
    assert out.splitlines()[1].count(" UTC") == 2  # run_at and updated_at


def test_show_says_what_a_sleeping_orchestration_waits_for(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from durabl import Orchestrator

    queue = JobQueue(backend_from_url(url))
    orch = Orchestrator(queue)
    wake = datetime(2099, 12, 24, tzinfo=timezone.utc)
    orch.define("advent", lambda job, octx: octx.sleep_until("eve", wake), start=False)
    queue.register("advent", orch.definitions["advent"].handler)
    job_id = queue.enqueue("advent", {}) or ""
    assert queue.run_pending() == 1
    queue.backend.close()
    _, out, _ = run(capsys, "show", job_id, "--url", url)
    assert "waiting_for:       until 2099-12-24T00:00:00Z" in out.splitlines()
    _, out, _ = run(capsys, "show", job_id, "--json", "--url", url)
    assert json.loads(out)["waiting_for"] == "until 2099-12-24T00:00:00Z"
