"""LimitedTypes: which types a store object reads a rate window for, and how fresh that is."""

from __future__ import annotations

import pytest

from durabl.model.flow import RATE_LIMITS_REFRESH, LimitedTypes
from durabl.testing import FakeClock


def test_the_stored_list_is_read_once_per_refresh() -> None:
    clock = FakeClock()
    limited = LimitedTypes(clock.monotonic)
    reads: list[int] = []

    def stored() -> list[str]:
        reads.append(1)
        return ["a"]

    assert limited.has_limit("a", stored)
    assert not limited.has_limit("b", stored)
    assert len(reads) == 1
    clock.advance(RATE_LIMITS_REFRESH - 0.001)
    assert not limited.has_limit("b", stored)
    assert len(reads) == 1
    clock.advance(0.001)
    limited.has_limit("b", stored)
    assert len(reads) == 2


def test_its_own_limits_count_at_once_and_survive_a_list_read_in_flight() -> None:
    limited = LimitedTypes(FakeClock().monotonic)
    assert limited.refresh_due()
    limited.note("a", True)  # set by this object while the list (read before) is in flight
    limited.replace([])
    assert "a" in limited
    limited.note("a", False)
    assert "a" not in limited


def test_a_failed_read_is_repeated_by_the_next_claim() -> None:
    limited = LimitedTypes(FakeClock().monotonic)

    def broken() -> list[str]:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        limited.has_limit("a", broken)
    assert limited.has_limit("a", lambda: ["a"])
