"""What the PostgreSQL peers share: the server's URL, a throwaway schema per measurement,
and the server's version and settings for the notes under the table.

Every library works in a schema of its own (``bench_<lib>_<random>``, reached through
``search_path`` or a qualified table name) in the one database, and the schema is dropped
with everything in it when the measurement ends, whether it passed or not.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from peers.common import Skip

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
#: The server every PostgreSQL peer runs against (the tests' variable is honoured too).
POSTGRES_URL = os.environ.get(
    "DURABL_BENCH_POSTGRES_URL", os.environ.get("DURABL_TEST_POSTGRES_URL", DEFAULT_URL)
)


def psycopg() -> Any:
    try:
        import psycopg as module
    except ImportError as exc:
        raise Skip(f"psycopg is not installed ({exc}); pip install -e '.[postgres]'") from exc
    return module


def connect(**kwargs: Any) -> Any:
    """An autocommit connection to the server; Skip when none answers."""
    module = psycopg()
    try:
        return module.connect(POSTGRES_URL, autocommit=True, connect_timeout=5, **kwargs)
    except module.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Skip(f"no PostgreSQL server at {redacted()}: {first}") from exc


def redacted(url: str = POSTGRES_URL) -> str:
    """The URL without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def local_server(url: str = POSTGRES_URL) -> bool:
    """Whether the server runs on this machine (a loopback host or a Unix socket)."""
    host = urlsplit(url).hostname or ""
    return host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")


def search_path_options(schema: str) -> str:
    """libpq ``options`` that make ``schema`` the connection's only schema."""
    return f"-c search_path={schema}"


@contextlib.contextmanager
def throwaway_schema(library: str) -> Iterator[str]:
    """A fresh, empty schema for one measurement; dropped (CASCADE) on the way out."""
    name = f"bench_{library}_{uuid.uuid4().hex[:8]}"
    with connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield name
    finally:
        with connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def server_facts() -> str:
    """The server's version and the settings that decide commit cost, for the notes."""
    with connect() as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("synchronous_commit", "fsync", "shared_buffers", "max_connections")
        }
    return f"PostgreSQL {version} ({', '.join(f'{k}={v}' for k, v in settings.items())})"
