"""``import durabl`` loads no database driver: pymongo and bson wait until a Mongo store
is used, so an application on SQLite or in memory never imports them. And it loads nothing
of durabl but the package: each public name loads its module on first use, so declaring
job types loads no queue and no store. (What each costs in milliseconds is measured by
``bench/import_cost.py``, not here.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DRIVERS = ("pymongo", "bson")


def modules_after(code: str) -> set[str]:
    """Every module loaded once ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


def loaded_after(code: str) -> list[str]:
    """The driver modules loaded once ``code`` ran in a fresh interpreter."""
    loaded = modules_after(code)
    return [module for module in DRIVERS if module in loaded]


def durabl_modules_after(code: str) -> set[str]:
    return {module for module in modules_after(code) if module.partition(".")[0] == "durabl"}


def test_import_durabl_loads_only_the_package() -> None:
    assert durabl_modules_after("import durabl") == {"durabl"}


def test_an_exception_name_loads_only_the_exceptions() -> None:
    loaded = durabl_modules_after("import durabl\ndurabl.DurablError")
    assert loaded == {"durabl", "durabl.model", "durabl.model.exceptions"}


def test_declaring_a_job_type_loads_no_queue_and_no_store() -> None:
    code = "import durabl\n@durabl.job('mail.send')\ndef send(job, ctx): pass"
    loaded = durabl_modules_after(code)
    assert "durabl.runtime.decorator" in loaded
    assert not {m for m in loaded if m.startswith(("durabl.stores", "durabl.runtime.queue"))}
    assert not {m for m in loaded if m.startswith(("durabl.runtime.worker", "durabl.orchestrator"))}


def test_a_name_loads_once_and_is_then_a_plain_attribute() -> None:
    import durabl

    first = durabl.JobQueue
    assert vars(durabl)["JobQueue"] is first
    assert durabl.JobQueue is first


def test_an_unknown_name_is_an_attribute_error() -> None:
    import durabl

    with pytest.raises(AttributeError, match="has no attribute 'Jobqueue'"):
        durabl.Jobqueue  # noqa: B018 - the lookup is the test


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
