"""A SQLite file that cannot be written is BackendUnavailableError, and stays as it was.

The write is tried in a child process. Root ignores file modes (``CAP_DAC_OVERRIDE``), so
as root the child first drops that capability from its bounding set and re-executes
itself: it is then held to the modes like any other user. The child checks that it really
cannot open the file for writing, and the test skips if it still can.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, SqliteJobQueue

ROOT = Path(__file__).resolve().parents[2]

# Run as root: drop CAP_DAC_OVERRIDE (prctl PR_CAPBSET_DROP), then exec the script, so that
# the new process starts without it.
DROP_DAC_OVERRIDE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE = 24, 1
if libc.prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0:
    print('{"skip": "cannot drop CAP_DAC_OVERRIDE: errno %d"}' % ctypes.get_errno())
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""

CHILD = """
import json, sys
path = sys.argv[1]
try:
    open(path, "r+b").close()  # opened and closed: nothing written
except PermissionError:
    pass
else:
    print(json.dumps({"skip": "this process can still open the file for writing"}))
    sys.exit(0)
from durabl import JobQueue, SqliteJobQueue
backend = SqliteJobQueue(path)
try:
    JobQueue(backend).enqueue("t", {"n": 2})
except Exception as exc:
    print(json.dumps({
        "error": type(exc).__name__,
        "bases": [cls.__name__ for cls in type(exc).__mro__],
        "message": str(exc),
    }))
else:
    print(json.dumps({"error": None}))
finally:
    backend.close()
"""


def enqueue_in_child(path: Path, tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    command = [sys.executable, str(script), str(path)]
    if getattr(os, "geteuid", lambda: -1)() == 0:
        if not sys.platform.startswith("linux"):
            pytest.skip("as root, a read-only file needs Linux capabilities to be honest")
        command = [sys.executable, "-c", DROP_DAC_OVERRIDE, *command[1:]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"no read-only file for this test: {result['skip']}")
    return result


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A durabl file holding one job; its modes are restored afterwards."""
    directory = tmp_path / "data"
    directory.mkdir()
    path = directory / "jobs.sqlite3"
    backend = SqliteJobQueue(path)
    JobQueue(backend).enqueue("t", {"n": 1})
    backend.close()
    yield path
    directory.chmod(0o755)
    for child in directory.iterdir():
        child.chmod(0o644)


def jobs_in(path: Path) -> list[Any]:
    backend = SqliteJobQueue(path)
    try:
        return [job.data for job in JobQueue(backend).list_jobs()]
    finally:
        backend.close()


READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH


def test_a_read_only_file_is_unavailable(db: Path, tmp_path: Path) -> None:
    db.chmod(READ_ONLY)
    result = enqueue_in_child(db, tmp_path)
    assert result["error"] == "BackendUnavailableError", result
    assert "DurablError" in result["bases"]
    assert "readonly" in result["message"]
    db.chmod(0o644)
    assert jobs_in(db) == [{"n": 1}]


def test_a_read_only_file_in_a_read_only_directory_is_unavailable(db: Path, tmp_path: Path) -> None:
    db.chmod(READ_ONLY)
    db.parent.chmod(0o555)
    result = enqueue_in_child(db, tmp_path)
    assert result["error"] == "BackendUnavailableError", result
    db.parent.chmod(0o755)
    db.chmod(0o644)
    assert jobs_in(db) == [{"n": 1}]
