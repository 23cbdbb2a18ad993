"""The determinism linter: finds bodies registered with define(), flags nondeterministic
direct calls outside steps (imports resolved through aliases), and the CLI's exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from durabl.cli import main
from durabl.orchestrator.lint import lint_source

EXAMPLES = Path(__file__).parent / "examples"
BAD = EXAMPLES / "bad.py"
GOOD = EXAMPLES / "good.py"


def expected(path: Path) -> list[tuple[int, str]]:
    marks = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = re.search(r"  # expect: ([\w.]+)$", line)
        if match:
            marks.append((number, match.group(1)))
    return marks


def test_every_marked_call_in_the_bad_examples_is_flagged_and_nothing_else() -> None:
    findings = lint_source(BAD.read_text(), str(BAD))
    assert [(f.line, f.call) for f in findings] == expected(BAD)
    assert len(findings) >= 15


def test_the_good_examples_are_clean() -> None:
    assert lint_source(GOOD.read_text(), str(GOOD)) == []


def test_a_finding_names_the_place_the_call_and_a_fix() -> None:
    source = (
        "import time\n"
        "@orch.define('t')\n"
        "def body(job, octx):\n"
        "    x = time.time()\n"
        "    octx.step('s', lambda k, s: time.time())\n"
    )
    (finding,) = lint_source(source, "app/jobs.py")
    assert (finding.line, finding.col, finding.call, finding.body) == (4, 9, "time.time", "body")
    assert str(finding) == (
        "app/jobs.py:4:9: time.time() in orchestration body 'body' gives a different result "
        "on resume; use octx.now() (journaled), or read the clock inside an octx.step(...)"
    )


@pytest.mark.parametrize(
    ("imports", "call", "flagged"),
    [
        ("import random as r", "r.choice([1, 2])", "random.choice"),
        ("from random import randint", "randint(1, 2)", "random.randint"),
        ("from datetime import datetime as dt", "dt.now()", "datetime.datetime.now"),
        ("import datetime", "datetime.datetime.utcnow()", "datetime.datetime.utcnow"),
        ("import datetime", "datetime.date.today()", "datetime.date.today"),
        ("from time import time_ns", "time_ns()", "time.time_ns"),
        ("import uuid", "uuid.uuid1()", "uuid.uuid1"),
        ("import socket", "socket.create_connection(('h', 1))", "socket.create_connection"),
        ("import os", "os.urandom(8)", "os.urandom"),
        ("", "input('?')", "builtins.input"),
    ],
)
def test_imports_are_resolved_through_aliases(imports: str, call: str, flagged: str) -> None:
    source = f"{imports}\n@o.define('t')\ndef body(job, octx):\n    {call}\n"
    assert [f.call for f in lint_source(source)] == [flagged]


@pytest.mark.parametrize(
    "code",
    [
        "import uuid\ndef uuid4(): return 1\n@o.define('t')\ndef b(j, x):\n    x.uuid('a')\n",
        "from datetime import timedelta\n@o.define('t')\ndef b(j, x):\n    timedelta(1)\n",
        "import time\ndef b(j, x):\n    time.time()\n",  # not registered
        "import time\n@o.define('t')\ndef b(j, x):\n    x.step('s', fn=lambda k, s: time.time())\n",
        "import random\nclass R:\n    def random(self): return 1\n"
        "@o.define('t')\ndef b(j, x):\n    R().random()\n",
    ],
)
def test_deterministic_code_is_not_flagged(code: str) -> None:
    assert lint_source(code) == []


def test_a_shadowed_open_is_still_a_builtin_unless_imported() -> None:
    source = "from io import open\n@o.define('t')\ndef b(j, x):\n    open('f')\n"
    assert lint_source(source) == []


def test_the_command_exits_1_on_findings_and_prints_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["lint-orchestrations", str(EXAMPLES)]) == 1
    out, err = capsys.readouterr()
    assert f"{BAD}:30:15: time.time() in orchestration body 'restart_trial'" in out
    assert "move it into an octx.step(...)" in out
    assert str(GOOD) not in out
    assert "finding(s) in 4 orchestration body(ies), 2 file(s)" in err


def test_the_command_exits_0_when_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint-orchestrations", str(GOOD)]) == 0
    assert "0 finding(s)" in capsys.readouterr().out


def test_the_command_exits_2_on_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint-orchestrations"]) == 2
    assert main(["lint-orchestrations", str(EXAMPLES / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_file_that_does_not_parse_is_reported_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert main(["lint-orchestrations", str(broken)]) == 1
    assert f"{broken}: cannot check" in capsys.readouterr().err


def test_python_dash_m_durabl_runs_the_linter() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "durabl", "lint-orchestrations", str(BAD)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout.count("\n") == len(expected(BAD))


def test_bodies_declared_through_django_are_linted() -> None:
    from durabl.orchestrator.lint import lint_source

    source = (
        "import time\n"
        "import durabl_django\n"
        "from durabl_django import orchestration\n\n"
        "@durabl_django.orchestration('a')\n"
        "def a(job, octx):\n"
        "    return time.time()\n\n"
        "@orchestration('b')\n"
        "def b(job, octx):\n"
        "    return time.time()\n"
    )
    findings = lint_source(source, "jobs.py")
    assert sorted(f.line for f in findings) == [7, 11]
