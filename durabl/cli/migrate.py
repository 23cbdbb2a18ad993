"""``durabl migrate``: create or upgrade a store's schema out of band, before any worker or
web process starts (or ``--check`` whether that is needed).

Store-neutral: the store's own ``startup()`` does the work (for PostgreSQL, each migration
under its advisory lock, so running this while workers start is safe), and
``schema_version()`` says where the schema stood before and after. A store without a
versioned schema (MongoDB ensures its indexes) is reported as such. ``--check`` only reads:
it opens a SQLite file without creating it, and a missing one is a pending setup.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TextIO

from durabl.cli.common import open_store, print_json, redact
from durabl.model.exceptions import StoreNotFoundError
from durabl.stores.base import Backend, SchemaVersion


@dataclass
class Outcome:
    """What ``durabl migrate`` found or did: its ``--json`` object, and one line to read.
    ``before``/``after``/``latest`` are schema versions (None: the store keeps none);
    ``pending`` whether setup is still needed afterwards; ``missing`` what a store without
    versions lacks (MongoDB: index names)."""

    url: str
    check: bool
    pending: bool
    before: int | None
    after: int | None
    latest: int | None
    message: str
    missing: list[str] = field(default_factory=list)


def describe(version: SchemaVersion | None) -> str:
    return "unversioned" if version is None else f"schema version {version.current}"


def run_migrate(url: str, *, check: bool, out: TextIO, as_json: bool = False) -> int:
    """Migrate (or check) the store at ``url``; one line on ``out`` (or a JSON object).
    Exit code: 0 done or nothing pending, 1 ``--check`` found a migration pending. Store
    errors propagate (the command line prints them on one line, exit 1)."""
    backend = open_store(url, create=not check)
    try:
        outcome = check_store(backend, url) if check else migrate_store(backend, url)
    finally:
        backend.close()
    if as_json:
        print_json(asdict(outcome), out)
    else:
        print(outcome.message, file=out)
    return 1 if outcome.pending else 0


def check_store(backend: Backend, url: str) -> Outcome:
    """What ``--check`` reports, read without changing the store."""
    where = redact(url)
    try:
        before = backend.schema_version()
    except StoreNotFoundError as exc:  # only a SQLite file can be missing
        line = (
            f"{where}: migration pending: schema version 0 ({exc.filename} does not exist "
            "yet); run `durabl migrate` to create it"
        )
        return Outcome(
            where, check=True, pending=True, before=0, after=0, latest=None, message=line
        )
    if before is None:
        missing = list(backend.pending_setup())
        if missing:
            line = f"{where}: setup pending: missing {', '.join(missing)}; run `durabl migrate`"
        else:
            line = f"{where}: no versioned schema; nothing pending"
        return Outcome(
            where,
            check=True,
            pending=bool(missing),
            before=None,
            after=None,
            latest=None,
            message=line,
            missing=missing,
        )
    if before.pending:
        line = (
            f"{where}: migration pending: {describe(before)}, this release's is "
            f"{before.latest}; run `durabl migrate`"
        )
    else:
        line = f"{where}: up to date at {describe(before)}"
    return Outcome(
        where,
        check=True,
        pending=before.pending,
        before=before.current,
        after=before.current,
        latest=before.latest,
        message=line,
    )


def migrate_store(backend: Backend, url: str) -> Outcome:
    """Run the store's ``startup()`` and report the schema before and after."""
    where = redact(url)
    before = backend.schema_version()
    backend.startup()
    after = backend.schema_version()
    if after is None:
        line = f"{where}: no versioned schema; indexes ensured"
    elif before is not None and before.current == after.current:
        line = f"{where}: up to date at {describe(after)}; nothing to do"
    else:
        line = f"{where}: migrated {describe(before)} -> {after.current}"
    return Outcome(
        where,
        check=False,
        pending=False,
        before=None if before is None else before.current,
        after=None if after is None else after.current,
        latest=None if after is None else after.latest,
        message=line,
    )
