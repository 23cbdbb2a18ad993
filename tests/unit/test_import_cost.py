"""``import durabl`` loads no database driver: pymongo and bson wait until a Mongo store
is used, so an application on SQLite or in memory never imports them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DRIVERS = ("pymongo", "bson")


def loaded_after(code: str) -> list[str]:
    """The driver modules loaded once ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {DRIVERS!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def test_import_durabl_loads_no_mongo_driver() -> None:
    assert loaded_after("import durabl") == []


def test_a_sqlite_store_from_a_url_loads_no_mongo_driver(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    code = f"import durabl\nb = durabl.backend_from_url({url!r})\nb.startup()\nb.close()"
    assert loaded_after(code) == []


def test_a_memory_queue_loads_no_mongo_driver() -> None:
    code = "import durabl\nq = durabl.JobQueue(durabl.MemoryBackend())\nq.get_stats()"
    assert loaded_after(code) == []


def test_the_mongo_store_still_imports_from_durabl() -> None:
    assert loaded_after("from durabl import MongoJobQueue") == list(DRIVERS)


def test_every_public_name_resolves() -> None:
    import durabl

    missing = [name for name in durabl.__all__ if getattr(durabl, name, None) is None]
    assert missing == []
    assert set(durabl.__all__) <= set(dir(durabl))
