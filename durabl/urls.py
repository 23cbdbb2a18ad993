"""``backend_from_url``: a backend from a URL, for settings, the CLI and the demo."""

from __future__ import annotations

from typing import Any

from durabl.backend import Backend
from durabl.exceptions import DurablError

SCHEMES = ("mongodb", "mongodb+srv", "mongomock", "sqlite")


def backend_from_url(url: str, **options: Any) -> Backend:
    """``mongodb://host/db``, ``mongodb+srv://...``, ``mongomock://[/db]`` (tests; one
    shared in-process store), ``sqlite:///relative.db`` or ``sqlite:////absolute.db``.

    Options (``database``, ``collection``, ``use_change_streams``) go to the backend.
    A malformed URL or unknown scheme is a ``ValueError``; nothing connects here.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"expected a backend URL such as mongodb://host/db, got {url!r}")
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("mongodb", "mongodb+srv", "mongomock"):
        from durabl.mongo.factory import from_url

        return from_url(url, **options)
    if scheme == "sqlite":
        raise DurablError(
            "the SQLite backend is not available in this release yet; use mongodb:// "
            "or mongomock:// for now"
        )
    raise ValueError(f"unknown backend URL scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
