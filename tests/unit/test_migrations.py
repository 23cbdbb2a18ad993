"""The versioned-schema rules every store with a schema shares."""

from __future__ import annotations

import pytest

from durabl import SchemaTooNewError
from durabl.model.exceptions import SchemaError
from durabl.model.migrations import (
    VersionedSchema,
    check_not_newer,
    latest_version,
    pending_migrations,
    stored_version,
)

STEPS = [(2, "add column"), (1, "create"), (3, "add index")]


def test_a_schema_needs_the_steps_past_its_version_in_order() -> None:
    assert latest_version(STEPS) == 3
    assert latest_version([]) == 0
    assert pending_migrations(STEPS, 0) == [(1, "create"), (2, "add column"), (3, "add index")]
    assert pending_migrations(STEPS, 2) == [(3, "add index")]
    assert pending_migrations(STEPS, 3) == []


def test_a_schema_a_newer_release_wrote_is_refused_with_both_ways_out() -> None:
    check_not_newer(3, 3, holder="SQLite file a.db", elsewhere="use another file")
    with pytest.raises(SchemaTooNewError) as raised:
        check_not_newer(4, 3, holder="SQLite file a.db", elsewhere="use another file")
    message = str(raised.value)
    assert message.startswith("SQLite file a.db has durabl schema version 4")
    assert "up to 3" in message and "Upgrade durabl (or use another file)" in message


@pytest.mark.parametrize("value", ["7", " 7 ", "07"])
def test_a_stored_version_is_its_digits(value: str) -> None:
    assert stored_version(value, holder="SQLite file a.db", fix="restore it") == 7


@pytest.mark.parametrize("value", ["", "1.5", "-1", "+1", "٣", None, 3])
def test_a_stored_version_that_is_no_number_is_refused(value: object) -> None:
    with pytest.raises(SchemaError, match="corrupt durabl schema_version") as raised:
        stored_version(value, holder="SQLite file a.db", fix="restore it")
    message = str(raised.value)
    assert message.startswith("SQLite file a.db holds") and repr(value) in message
    assert message.endswith("restore it.")


def test_a_versioned_schema_says_what_still_runs_and_refuses_a_newer_one() -> None:
    schema = VersionedSchema(STEPS, elsewhere="use another file")
    assert schema.latest == 3
    assert schema.pending(1, "SQLite file a.db") == [(2, "add column"), (3, "add index")]
    assert schema.needs(2, 1, "SQLite file a.db") is True
    assert schema.needs(2, 2, "SQLite file a.db") is False  # another process ran it
    with pytest.raises(SchemaTooNewError, match="use another file"):
        schema.pending(4, "SQLite file a.db")
    with pytest.raises(SchemaTooNewError, match=r"SQLite file a\.db"):
        schema.needs(2, 4, "SQLite file a.db")
