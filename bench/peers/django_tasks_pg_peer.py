"""django-tasks-db's ``DatabaseBackend`` on PostgreSQL, run by ``db_worker``.

The same driving as on SQLite (django_tasks_peer.py: generated settings, ``migrate``, N
``db_worker`` processes of one task at a time each, ``--interval 0.05``), with Django's
PostgreSQL backend (psycopg 3) and persistent connections (``CONN_MAX_AGE = None``) in the
measurement's own schema (``OPTIONS["options"] = "-c search_path=<schema>"``). On
PostgreSQL ``db_worker`` claims with ``select_for_update(skip_locked=True)``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from peers.common import Measured
from peers.django_tasks_peer import DjangoTasks
from peers.pg import POSTGRES_URL, connect, search_path_options, throwaway_schema


def databases(schema: str, url: str = POSTGRES_URL) -> str:
    """The settings' DATABASES for ``url``, as Python source."""
    parts = urlsplit(url)
    default = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": None,  # persistent connections
        "OPTIONS": {"options": search_path_options(schema)},
    }
    return repr({"default": default})


class DjangoTasksPostgres(DjangoTasks):
    polling = (
        "db_worker --interval 0.05 (default 1s) --no-startup-delay; CONN_MAX_AGE=None; "
        "one task at a time per process, each process polls on its own"
    )

    def __init__(self) -> None:
        super().__init__()
        self._schema = ""

    def version(self) -> str:
        found = super().version()
        connect().close()
        return found

    def successful(self, path: Path) -> int:
        with connect() as conn:
            row = conn.execute(
                f'SELECT count(*) FROM "{self._schema}".django_tasks_database_dbtaskresult '
                "WHERE status = 'SUCCESSFUL'"
            ).fetchone()
        return int(row[0])

    def throughput(self, workdir: Path, jobs: int, workers: int, timeout: float) -> Measured:
        with throwaway_schema("django_tasks") as schema:
            self._schema, self.databases = schema, databases(schema)
            return super().throughput(workdir, jobs, workers, timeout)

    def latency(
        self, workdir: Path, count: int, rate: float, workers: int, producer: str, timeout: float
    ) -> Measured:
        with throwaway_schema("django_tasks") as schema:
            self._schema, self.databases = schema, databases(schema)
            return super().latency(workdir, count, rate, workers, producer, timeout)
