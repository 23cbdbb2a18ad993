"""The versioned-schema rules every store with a schema shares."""

from __future__ import annotations

import pytest

from durabl import SchemaTooNewError
from durabl.model.migrations import check_not_newer, latest_version, pending_migrations

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
