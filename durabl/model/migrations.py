"""The rules of a versioned schema, the same for every store that keeps one.

A store lists its migrations as ``(number, step)`` pairs, numbered from 1; what a step is
(a function of a connection, a list of statements) is the store's business. The store
records the number of the last step it applied; these functions say which steps a schema
at some version still needs, and refuse a schema that a newer release wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from durabl.model.exceptions import SchemaTooNewError

M = TypeVar("M", bound="tuple[int, Any]")


def latest_version(migrations: Sequence[tuple[int, Any]]) -> int:
    """The version a schema has once every migration has run (0: none listed)."""
    return max((number for number, _ in migrations), default=0)


def pending_migrations(migrations: Sequence[M], version: int) -> list[M]:
    """The migrations a schema at ``version`` still needs, in order."""
    return sorted((m for m in migrations if m[0] > version), key=lambda m: m[0])


def check_not_newer(version: int, latest: int, *, holder: str, elsewhere: str) -> None:
    """Raise :class:`SchemaTooNewError` when ``version`` is past ``latest``: a newer release
    wrote the schema, and this one must not guess what its columns mean. ``holder`` names
    what holds the schema ("SQLite file /srv/jobs.db"); ``elsewhere`` is the other way out
    besides upgrading ("point this process at another file")."""
    if version > latest:
        raise SchemaTooNewError(
            f"{holder} has durabl schema version {version}, but this release knows versions "
            f"up to {latest}: a newer durabl wrote it. Upgrade durabl (or {elsewhere})."
        )
