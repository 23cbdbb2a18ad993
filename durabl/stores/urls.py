"""``backend_from_url``: a backend from a URL, for settings, the CLI and the demo.

Only a dispatch: the URL's scheme names a store, imported on first use, whose ``from_url``
parses and checks the rest (so a SQLite URL never imports the MongoDB driver).
"""

from __future__ import annotations

import importlib
from typing import Any

from durabl.stores.base import Backend

#: scheme -> (module, class): the class's ``from_url(url, **options)`` builds the store.
STORES: dict[str, tuple[str, str]] = {
    "mongodb": ("durabl.stores.mongo", "MongoJobQueue"),
    "mongodb+srv": ("durabl.stores.mongo", "MongoJobQueue"),
    "mongomock": ("durabl.stores.mongo", "MongoJobQueue"),
    "sqlite": ("durabl.stores.sqlite", "SqliteJobQueue"),
    "postgresql": ("durabl.stores.postgres", "PostgresJobQueue"),
    "postgres": ("durabl.stores.postgres", "PostgresJobQueue"),
}
SCHEMES = tuple(STORES)


def backend_from_url(url: str, **options: Any) -> Backend:
    """``mongodb://host/db``, ``mongodb+srv://...``, ``mongomock://[/db]`` (tests; one
    shared in-process store), ``sqlite:///relative.db`` or ``sqlite:////absolute.db``.

    Options go to the store's ``from_url``: ``database``, ``collection``,
    ``use_change_streams`` for MongoDB; ``clock``, ``busy_timeout``, ``synchronous``,
    ``change_check_interval``, ``create`` (False: open an existing file only, else
    :class:`StoreNotFoundError`) for SQLite.
    A malformed URL or unknown scheme is a ``ValueError``; nothing connects here.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"expected a backend URL such as mongodb://host/db, got {url!r}")
    scheme = url.split("://", 1)[0].lower()
    target = STORES.get(scheme)
    if target is None:
        raise ValueError(
            f"unknown backend URL scheme {scheme!r}; expected one of {', '.join(SCHEMES)}"
        )
    module, name = target
    store: Backend = getattr(importlib.import_module(module), name).from_url(url, **options)
    return store


def sqlite_path(url: str) -> str:
    """The file a ``sqlite://`` URL names (see :meth:`SqliteJobQueue.path_from_url`)."""
    from durabl.stores.sqlite import SqliteJobQueue

    return SqliteJobQueue.path_from_url(url)
