"""The command line: ``python -m durabl demo`` and ``python -m durabl reap``."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from durabl import JobQueue, MongoJobQueue, QueueStats, backend_from_url
from durabl.cli import main
from durabl.cli.demo import Progress, workload


def fresh_url() -> str:
    return f"mongomock:///demo_{uuid.uuid4().hex[:12]}"


def number(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not found in:\n{text}"
    return int(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize("store", ["mongomock", "default-sqlite"])
def test_demo_runs_every_job_to_an_end(
    store: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the default SQLite file lands in the working directory
    url = ["--url", fresh_url()] if store == "mongomock" else []
    argv = ["demo", *url, "--jobs", "60", "--no-progress", "--seconds", "40"]
    assert main(argv) == 0
    if store == "default-sqlite":
        assert (tmp_path / "durabl-demo.sqlite3").exists()
        assert main(argv) == 0  # a second run starts the demo's own file afresh
        capsys.readouterr()
        assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "\r" not in out
    assert not re.search(r"^\[\s*\d", out, re.M), "--no-progress printed progress lines"
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    for type in ("send-email", "resize-image", "sync-account", "total"):
        assert type in rows, out
        pending, active = rows[type][:2]
        assert (pending, active) == ("0", "0"), out
    summary = out.strip().splitlines()[-1]
    assert number(r"(\d+) completed", summary) > 0
    assert number(r"(\d+) fatal", summary) >= 1
    assert number(r"(\d+) recovered by the reaper", summary) >= 1
    assert number(r"(\d+) deduplicated", summary) >= 1


def test_demo_workload_mixes_every_behaviour() -> None:
    jobs = list(workload(60))
    assert len(jobs) == 59  # the crashed worker's job is enqueued on its own
    modes = Counter(data["mode"] for type, data, _ in jobs if type == "sync-account")
    assert modes["poison"] >= 1 and modes["broken"] >= 1 and modes["flaky"] >= 1
    keys = [opts["dedupe_key"] for type, _, opts in jobs if type == "send-email"]
    assert len(set(keys)) < len(keys)
    assert any("delay" in opts for type, _, opts in jobs if type == "resize-image")


def test_demo_refuses_an_existing_sqlite_file_it_does_not_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "app.sqlite3"
    precious.write_bytes(b"")
    assert main(["demo", "--url", f"sqlite:///{precious}", "--no-progress"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert precious.read_bytes() == b""


def test_demo_with_an_unknown_scheme_fails_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--url", "ftp://x"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "ftp" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv", [[], ["nope"], ["demo", "--jobs", "0"], ["demo", "--seconds", "-1"], ["reap"]]
)
def test_usage_errors_exit_2(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABL_URL", raising=False)
    assert main(argv) == 2


def test_reap_recovers_expired_leases(capsys: pytest.CaptureFixture[str]) -> None:
    url = fresh_url()
    backend = backend_from_url(url)
    assert isinstance(backend, MongoJobQueue)
    queue = JobQueue(backend)
    try:
        retryable = queue.enqueue("sync", {"n": 1})
        last_try = queue.enqueue("sync", {"n": 2}, max_attempts=1)
        fresh = queue.enqueue("other", {"n": 3})
        assert len(backend.claim("sync", limit=2)) == 2
        assert len(backend.claim("other", limit=1)) == 1
        # Two workers died an hour ago; the third is alive (its lease is fresh).
        an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
        backend.col.update_many({"type": "sync"}, {"$set": {"heartbeat_at": an_hour_ago}})

        assert main(["reap", "--url", url, "--visibility-timeout", "60"]) == 0
        out, _ = capsys.readouterr()
        assert "reaped 2 job(s)" in out
        assert "1 pending again" in out and "1 failed as stalled" in out

        statuses = {
            job_id: job.status
            for job_id in (retryable, last_try, fresh)
            if job_id and (job := queue.get_job(job_id))
        }
        assert statuses == {retryable: "pending", last_try: "failed", fresh: "active"}

        assert main(["reap", "--url", url, "--visibility-timeout", "60"]) == 0
        assert "reaped 0 job(s)" in capsys.readouterr().out
    finally:
        queue.shutdown(timeout=1)
        backend.drop()


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_one_line_on_a_terminal() -> None:
    term = FakeTerminal()
    bar = Progress(term, enabled=True)
    counts: Counter[str] = Counter(completed=3)
    bar.show(counts, QueueStats(pending=5), 10, 0.0, final=False)
    bar.show(counts, QueueStats(pending=5), 10, 0.05, final=False)  # too soon: skipped
    bar.show(counts, QueueStats(pending=2), 10, 0.3, final=False)
    bar.show(counts, QueueStats(), 10, 0.35, final=True)
    text = term.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1


def test_progress_prints_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    bar = Progress(out, enabled=True)
    for tenth in range(25):
        bar.show(Counter(), QueueStats(pending=1), 10, tenth / 10, final=False)
    bar.show(Counter(), QueueStats(), 10, 2.5, final=True)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 4  # at 0 s, 1 s, 2 s, and the final line
    silent = io.StringIO()
    Progress(silent, enabled=False).show(Counter(), QueueStats(), 1, 0.0, final=True)
    assert silent.getvalue() == ""


def test_python_dash_m_durabl_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "durabl", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0
    assert "demo" in done.stdout and "reap" in done.stdout
