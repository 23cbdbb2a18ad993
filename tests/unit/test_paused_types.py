"""The set of paused types a MongoDB store object keeps (``durabl.model.pauses``): exact
for its own pauses and resumes, read again when old, and what its watcher asks while a
type is paused (which types another process resumed)."""

from __future__ import annotations

from durabl.model.pauses import PAUSED_RECHECK, PAUSED_TYPES_REFRESH, PausedTypes


class Stored:
    """The store's set, and how often it was read."""

    def __init__(self, *types: str) -> None:
        self.types = set(types)
        self.reads = 0

    def read(self) -> list[str]:
        self.reads += 1
        return sorted(self.types)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_claim_reads_the_set_only_when_it_is_old() -> None:
    clock, stored = Clock(), Stored("report")
    known = PausedTypes(clock)
    assert known.is_paused("report", stored.read) and stored.reads == 1
    assert not known.is_paused("mail", stored.read) and stored.reads == 1
    stored.types = {"mail"}  # another process paused mail and resumed report
    clock.now += PAUSED_TYPES_REFRESH - 0.1
    assert not known.is_paused("mail", stored.read)  # not read again yet
    clock.now += 0.2
    assert known.is_paused("mail", stored.read) and stored.reads == 2


def test_resumed_reads_nothing_while_no_type_is_paused() -> None:
    clock, stored = Clock(), Stored()
    known = PausedTypes(clock)
    known.load(stored.read)
    clock.now += 60
    assert known.resumed(stored.read) == frozenset()
    assert stored.reads == 1


def test_resumed_names_what_another_process_resumed_at_most_every_recheck() -> None:
    clock, stored = Clock(), Stored("report", "mail")
    known = PausedTypes(clock)
    known.load(stored.read)
    stored.types = {"mail"}  # resumed elsewhere
    assert known.resumed(stored.read) == frozenset()  # read a moment ago: not again
    assert stored.reads == 1
    clock.now += PAUSED_RECHECK
    assert known.resumed(stored.read) == {"report"}
    assert not known.is_paused("report", stored.read)
    clock.now += PAUSED_RECHECK
    assert known.resumed(stored.read) == frozenset()  # mail is still paused
    assert stored.reads == 3
