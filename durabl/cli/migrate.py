"""``durabl migrate``: create or upgrade a store's schema out of band, before any worker or
web process starts (or ``--check`` whether that is needed).

Store-neutral: the store's own ``startup()`` does the work (for PostgreSQL, each migration
under its advisory lock, so running this while workers start is safe), and
``schema_version()`` says where the schema stood before and after. A store without a
versioned schema (MongoDB ensures its indexes) is reported as such.
"""

from __future__ import annotations

from typing import TextIO

from durabl.cli.common import open_store, redact
from durabl.stores.base import SchemaVersion


def describe(version: SchemaVersion | None) -> str:
    return "unversioned" if version is None else f"schema version {version.current}"


def run_migrate(url: str, *, check: bool, out: TextIO) -> int:
    """Migrate (or check) the store at ``url``; one line on ``out``. Exit code: 0 done or
    nothing pending, 1 ``--check`` found a migration pending. Store errors propagate (the
    command line prints them on one line, exit 1)."""
    where = redact(url)
    backend = open_store(url)
    try:
        before = backend.schema_version()
        if check:
            if before is None:
                pending = backend.pending_setup()
                if pending:
                    print(
                        f"{where}: setup pending: missing {', '.join(pending)}; "
                        "run `durabl migrate`",
                        file=out,
                    )
                    return 1
                print(f"{where}: no versioned schema; nothing pending", file=out)
                return 0
            if before.pending:
                print(
                    f"{where}: migration pending: {describe(before)}, this release's is "
                    f"{before.latest}; run `durabl migrate`",
                    file=out,
                )
                return 1
            print(f"{where}: up to date at {describe(before)}", file=out)
            return 0
        backend.startup()
        after = backend.schema_version()
    finally:
        backend.close()
    if after is None:
        print(f"{where}: no versioned schema; indexes ensured", file=out)
    elif before is not None and before.current == after.current:
        print(f"{where}: up to date at {describe(after)}; nothing to do", file=out)
    else:
        print(f"{where}: migrated {describe(before)} -> {after.current}", file=out)
    return 0
