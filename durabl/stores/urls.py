"""``backend_from_url``: a backend from a URL, for settings, the CLI and the demo."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from durabl.stores.base import Backend

SCHEMES = ("mongodb", "mongodb+srv", "mongomock", "sqlite")


def backend_from_url(url: str, **options: Any) -> Backend:
    """``mongodb://host/db``, ``mongodb+srv://...``, ``mongomock://[/db]`` (tests; one
    shared in-process store), ``sqlite:///relative.db`` or ``sqlite:////absolute.db``.

    Options go to the backend: ``database``, ``collection``, ``use_change_streams`` for
    MongoDB; ``clock``, ``busy_timeout``, ``synchronous``, ``change_check_interval`` for
    SQLite.
    A malformed URL or unknown scheme is a ``ValueError``; nothing connects here.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"expected a backend URL such as mongodb://host/db, got {url!r}")
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("mongodb", "mongodb+srv", "mongomock"):
        from durabl.stores.mongo.factory import from_url

        return from_url(url, **options)
    if scheme == "sqlite":
        return _sqlite_from_url(url, **options)
    raise ValueError(f"unknown backend URL scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")


def sqlite_path(url: str) -> str:
    """The file a ``sqlite://`` URL names (relative paths stay relative to the cwd)."""
    rest = url.split("://", 1)[1] if "://" in url else ""
    if not rest.startswith("/") or len(rest) < 2 or "?" in rest or "#" in rest:
        raise ValueError(
            f"expected sqlite:///relative/path.db or sqlite:////absolute/path.db, got {url!r}"
        )
    path = unquote(rest[1:])
    if path in ("", ":memory:"):
        raise ValueError(f"{url!r} names no database file; SQLite needs a file path here")
    return path


def _sqlite_from_url(url: str, **options: Any) -> Backend:
    """SQLAlchemy's convention: ``sqlite:///rel.db`` is relative to the working directory,
    ``sqlite:////abs.db`` absolute. Options (``clock``, ``busy_timeout``, ``synchronous``,
    ``change_check_interval``)
    go to :class:`~durabl.stores.sqlite.SqliteJobQueue`."""
    from durabl.stores.sqlite import SqliteJobQueue

    path = sqlite_path(url)
    unknown = set(options) - {"clock", "busy_timeout", "synchronous", "change_check_interval"}
    if unknown:
        raise ValueError(f"sqlite:// URLs take no options {sorted(unknown)}")
    return SqliteJobQueue(path, **options)
