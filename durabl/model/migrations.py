"""The rules of a versioned schema, the same for every store that keeps one.

A store lists its migrations as ``(number, step)`` pairs, numbered from 1; what a step is
(a function of a connection, a list of statements) is the store's business. The store
records the number of the last step it applied; these functions say which steps a schema
at some version still needs, and refuse a schema that a newer release wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from durabl.model.exceptions import SchemaError, SchemaTooNewError

M = TypeVar("M", bound="tuple[int, Any]")

VERSION_KEY = "schema_version"
"""The key under which a store records the number of the last migration it applied."""


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


def stored_version(value: object, *, holder: str, fix: str) -> int:
    """The version a store recorded under :data:`VERSION_KEY` (its digits, spaces around
    allowed). Anything else is a :class:`SchemaError`: which migrations the schema needs
    cannot be guessed. ``holder`` names where it was read, ``fix`` the ways out."""
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit():
        return int(text)
    raise SchemaError(
        f"{holder} holds a corrupt durabl {VERSION_KEY}: {value!r} is not a version number. "
        f"durabl will not guess which migrations it needs: {fix}."
    )


@dataclass(frozen=True)
class VersionedSchema(Generic[M]):
    """A store's migrations, and the way out its refusals name besides upgrading
    (``elsewhere``: "point this process at another file"). Each check names ``holder``,
    what holds the schema ("SQLite file /srv/jobs.db")."""

    migrations: Sequence[M]
    elsewhere: str

    @property
    def latest(self) -> int:
        return latest_version(self.migrations)

    def pending(self, version: int, holder: str) -> list[M]:
        """The migrations a schema at ``version`` still needs, in order; refused
        (:func:`check_not_newer`) when a newer release wrote it."""
        check_not_newer(version, self.latest, holder=holder, elsewhere=self.elsewhere)
        return pending_migrations(self.migrations, version)

    def needs(self, number: int, version: int, holder: str) -> bool:
        """Whether migration ``number`` still has to run on a schema found at ``version``
        (read again under the store's lock, just before: another process may have run it
        meanwhile); refused as :meth:`pending` refuses."""
        check_not_newer(version, self.latest, holder=holder, elsewhere=self.elsewhere)
        return version < number
