"""The import contracts in pyproject.toml ([tool.importlinter]) hold, and they do catch a
violation: each deliberate one below breaks exactly the contract it should."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="import-linter is not installed (the dev extra)"
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(root), "PATH": str(LINT_IMPORTS.parent)},
    )


def test_the_tree_keeps_every_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("durabl/model/rules.py", "import durabl.runtime.queue", "durabl's layers"),
        ("durabl/runtime/reaper.py", "import durabl.stores.sqlite", "the runtime reaches stores"),
        ("durabl/stores/sqlite/codec.py", "import durabl.stores.memory", "stores do not import"),
        ("durabl/model/clock.py", "import django", "the core never imports Django"),
        ("durabl_django/conf.py", "import durabl.runtime.queue", "durabl_django uses durabl"),
        ("durabl/runtime/heartbeat.py", "import durabl.runtime.worker", "no import cycles"),
    ],
)
def test_a_deliberate_violation_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    for package in ("durabl", "durabl_django"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # deliberate\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    broken = [row for row in done.stdout.splitlines() if row.endswith(" BROKEN")]
    assert any(row.startswith(contract) for row in broken), broken
    # An import up the layers also closes a cycle (the upper layer imports the lower one);
    # every other violation breaks its own contract alone.
    expected = 2 if contract == "durabl's layers" else 1
    assert len(broken) == expected, broken
