"""The Makefile's install step for the Debian packages some tests use (as root, in CI)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_the_test_packages_install_only_what_the_tests_need_and_quietly() -> None:
    recipe = subprocess.run(
        ["make", "-n", "--no-print-directory", "test-packages"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    install = recipe[recipe.index("apt-get install") :]
    # Recommended packages would bring systemd, avahi and cups helpers (126 packages, not 26).
    assert "--no-install-recommends" in install
    assert "-qq" in install
    # dpkg's progress goes to a log shown only when the install fails.
    assert '>"$log" 2>&1' in recipe
    assert 'tail -n 5 "$log"' in recipe
