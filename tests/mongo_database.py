"""A database of a test's own on the real MongoDB server (``tests.conftest.require_mongo``),
named in a ``mongodb://`` URL so a subprocess or a Django setting can be pointed at it, and
dropped after the test. Used where a store is configured by URL (the Django app, the
example project) rather than built in the test."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def url_with_database(url: str, database: str) -> str:
    """``url`` naming ``database`` in its path; the server URL's query options are kept
    (``?replicaSet=...``), and a database it named is replaced."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def fresh_database_url(prefix: str) -> str:
    """A URL for a new database, ``<prefix>_<random>``, on the real MongoDB server; skips
    the test when there is none (fails it where a server is required)."""
    from tests.conftest import require_mongo

    return url_with_database(require_mongo(), f"{prefix}_{uuid.uuid4().hex[:12]}")


def drop_database(url: str) -> None:
    """Drop the database ``url`` names."""
    from pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(url, serverSelectionTimeoutMS=10_000)
    try:
        client.drop_database(urlsplit(url).path.lstrip("/"))
    finally:
        client.close()
