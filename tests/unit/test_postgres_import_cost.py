"""``import durabl`` loads no PostgreSQL driver: psycopg waits until a PostgreSQL store is
used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ("psycopg", "psycopg_pool")


def loaded_after(code: str) -> set[str]:
    """The PostgreSQL driver modules loaded once ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {DRIVERS!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_import_durabl_loads_no_postgres_driver() -> None:
    assert loaded_after("import durabl") == set()


def test_a_sqlite_store_from_a_url_loads_no_postgres_driver(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    code = f"import durabl\nb = durabl.backend_from_url({url!r})\nb.startup()\nb.close()"
    assert loaded_after(code) == set()


def test_the_postgres_store_imports_its_driver_on_first_use() -> None:
    assert loaded_after("from durabl import PostgresJobQueue") == set(DRIVERS)


def test_a_postgres_url_builds_the_store_without_connecting() -> None:
    code = (
        "import durabl\nb = durabl.backend_from_url('postgres://u:pw@127.0.0.1:1/db?table=x')\n"
        "assert type(b).__name__ == 'PostgresJobQueue' and b.table == 'x', b"
    )
    assert loaded_after(code) == set(DRIVERS)
