"""list_jobs(order=...) and the meaning of ``search`` (id prefix, dedupe-key prefix, text of
the failure reason), the same on every store."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from durabl.model.job import JobFilter
from durabl.model.rules import JOB_ORDER_FIELDS, JobPage, job_order
from durabl.stores import engine
from durabl.stores.base import Backend
from durabl.stores.engine import StoreBase
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue_id


def test_order_sorts_by_each_field_both_ways_with_ties_newest_first(
    backend: Backend, clock: FakeClock
) -> None:
    later = clock.now() + timedelta(hours=1)
    b1 = enqueue_id(backend, "b", data={"n": 1}, priority=2)
    clock.advance(1)
    a1 = enqueue_id(backend, "a", data={"n": 2}, priority=1, run_at=later)
    clock.advance(1)
    b2 = enqueue_id(backend, "b", data={"n": 3}, priority=1)
    clock.advance(1)
    upper = enqueue_id(backend, "B", data={"n": 4}, priority=3)

    def ids(order: str) -> list[str]:
        return [j.id for j in backend.list_jobs(order=order)]

    # Code point order: "B" < "a" < "b"; the two "b" jobs newest first either way.
    assert ids("type") == [upper, a1, b2, b1]
    assert ids("-type") == [b2, b1, a1, upper]
    assert ids("priority") == [b2, a1, b1, upper]
    assert ids("-priority") == [upper, b1, b2, a1]
    assert ids("created_at") == [b1, a1, b2, upper]
    assert ids("-created_at") == [upper, b2, a1, b1]
    assert ids("-run_at")[0] == a1
    assert ids("run_at")[-1] == a1
    # Paging follows the order.
    assert [j.id for j in backend.list_jobs(order="type", limit=2, offset=1)] == [a1, b2]


def test_order_by_attempts_and_updated_at(backend: Backend, clock: FakeClock) -> None:
    idle = enqueue_id(backend, data={"n": 1})
    clock.advance(1)
    busy = enqueue_id(backend, data={"n": 2}, priority=-1)
    assert claim_one(backend).id == busy
    assert [j.id for j in backend.list_jobs(order="-attempts")] == [busy, idle]
    assert [j.id for j in backend.list_jobs(order="attempts")] == [idle, busy]
    assert backend.list_jobs(order="-updated_at")[0].id == busy


def test_order_combines_with_filters(backend: Backend) -> None:
    enqueue_id(backend, "a", data={"n": 1}, priority=5)
    low = enqueue_id(backend, "b", data={"n": 2}, priority=1)
    high = enqueue_id(backend, "b", data={"n": 3}, priority=9)
    assert [j.id for j in backend.list_jobs(type="b", order="-priority")] == [high, low]


def test_order_by_finish_time_puts_jobs_not_finished_lowest(
    backend: Backend, clock: FakeClock
) -> None:
    done = enqueue_id(backend, data={"n": 1})
    first = enqueue_id(backend, data={"n": 2})
    second = enqueue_id(backend, data={"n": 3})
    waiting = enqueue_id(backend, data={"n": 4})
    clock.advance(60)
    assert claim_one(backend).complete() == "completed"
    clock.advance(60)
    assert claim_one(backend).fail_fatal("no") == "failed-terminal"  # first
    assert claim_one(backend).fail_fatal("no") == "failed-terminal"  # second, same time

    def ids(order: str, **filters: Any) -> list[str]:
        return [j.id for j in backend.list_jobs(order=order, **filters)]

    assert ids("finished_at") == [waiting, done, second, first]  # ties newest first
    assert ids("-finished_at") == [second, first, done, waiting]
    # The failed list's sort by finish time is read from its index: the same answers.
    assert ids("finished_at", status="failed") == [second, first]
    assert ids("-finished_at", status="failed") == [second, first]
    assert ids("-finished_at", status="completed") == [done]
    assert ids("finished_at", status="pending") == [waiting]
    page = backend.list_jobs(order="-finished_at", status="failed", limit=1, offset=1)
    assert [j.id for j in page] == [first]


def test_the_pending_list_sorts_by_due_time_both_ways_with_ties_newest_first(
    backend: Backend, clock: FakeClock
) -> None:
    hour = clock.now() + timedelta(hours=1)
    last = enqueue_id(backend, data={"n": 1}, run_at=hour + timedelta(hours=1))
    tied_old = enqueue_id(backend, data={"n": 2}, run_at=hour)
    tied_new = enqueue_id(backend, data={"n": 3}, run_at=hour)
    due = enqueue_id(backend, data={"n": 4})
    running = enqueue_id(backend, data={"n": 5}, priority=-1)
    assert claim_one(backend).id == running  # not pending: not in the pending list

    def ids(order: str, **page: int) -> list[str]:
        return [j.id for j in backend.list_jobs(order=order, status="pending", **page)]

    assert ids("run_at") == [due, tied_new, tied_old, last]
    assert ids("-run_at") == [last, tied_new, tied_old, due]
    assert ids("run_at", limit=2, offset=1) == [tied_new, tied_old]
    assert [j.id for j in backend.list_jobs(order="run_at", status="pending", type="t")] == [
        due,
        tied_new,
        tied_old,
        last,
    ]


@pytest.mark.parametrize("order", ["fail_reason", "id", "-", "", "--type", "data"])
def test_an_unknown_order_is_a_value_error_naming_the_sortable_fields(
    backend: Backend, order: str
) -> None:
    with pytest.raises(ValueError, match="created_at"):
        backend.list_jobs(order=order)


def test_a_non_string_order_is_a_type_error(backend: Backend) -> None:
    with pytest.raises(TypeError):
        backend.list_jobs(order=1)  # type: ignore[arg-type]


def test_job_order_rule() -> None:
    assert job_order(None) is None
    for field in JOB_ORDER_FIELDS:
        assert job_order(field) == job_order(field)
        order = job_order("-" + field)
        assert order is not None and order.descending and order.field == field


def test_search_matches_an_id_prefix(backend: Backend) -> None:
    target = enqueue_id(backend, data={"n": 1})
    others = [enqueue_id(backend, data={"n": n}) for n in range(2, 6)]
    for cut in (len(target), len(target) - 2, len(target) // 2):
        prefix = target[:cut]
        expected = {target} | {o for o in others if o.startswith(prefix)}
        assert {j.id for j in backend.list_jobs(search=prefix)} == expected
        assert backend.count_jobs(search=prefix) == len(expected)


def test_search_matches_text_in_the_failure_reason(backend: Backend) -> None:
    failing = enqueue_id(backend, data={"n": 1}, priority=-1)
    enqueue_id(backend, data={"n": 2})
    assert claim_one(backend).fail_fatal("SMTP said: 550 mailbox (full)") == "failed-terminal"
    assert [j.id for j in backend.list_jobs(search="550 mailbox")] == [failing]
    assert [j.id for j in backend.list_jobs(search="(full)")] == [failing]  # literal
    assert backend.count_jobs(search="550", status="failed") == 1
    assert backend.list_jobs(search="550 MAILBOX") == []  # case-sensitive
    assert backend.list_jobs(search="5.0") == []  # no wildcards
    assert backend.list_jobs(search="mailbox%") == []


def test_time_range_filters(backend: Backend, clock: FakeClock) -> None:
    start = clock.now()
    early = enqueue_id(backend, data={"n": 1})
    clock.advance(60)
    middle = enqueue_id(backend, data={"n": 2})
    clock.advance(60)
    late = enqueue_id(backend, data={"n": 3}, priority=-1)
    clock.advance(60)
    assert claim_one(backend).id == late  # updated now

    def ids(**filters: Any) -> set[str]:
        return {j.id for j in backend.list_jobs(**filters)}

    minute = timedelta(seconds=60)
    assert ids(created_after=start + minute) == {middle, late}
    assert ids(created_before=start + minute) == {early}
    assert ids(created_after=start + minute, created_before=start + 2 * minute) == {middle}
    assert ids(updated_after=start + 3 * minute) == {late}
    assert ids(updated_before=start + 3 * minute) == {early, middle}
    assert backend.count_jobs(created_after=start, created_before=start + minute) == 1
    assert ids(created_after=start + 10 * minute) == set()


def test_finished_range_filters_select_finished_jobs_only(
    backend: Backend, clock: FakeClock
) -> None:
    start = clock.now()
    first = enqueue_id(backend, data={"n": 1})
    second = enqueue_id(backend, data={"n": 2})
    waiting = enqueue_id(backend, data={"n": 3})
    clock.advance(60)
    assert claim_one(backend).complete() == "completed"  # first, finished at start + 1 min
    clock.advance(60)
    assert claim_one(backend).fail_fatal("no") == "failed-terminal"  # second, + 2 min
    minute = timedelta(seconds=60)

    def ids(**filters: Any) -> set[str]:
        return {j.id for j in backend.list_jobs(**filters)}

    assert ids(finished_after=start) == {first, second}  # never the pending one
    assert ids(finished_after=start + 2 * minute) == {second}
    assert ids(finished_before=start + 2 * minute) == {first}
    assert waiting not in ids(finished_before=start + 10 * minute)
    assert backend.count_jobs(status="failed", finished_after=start + minute) == 1
    assert backend.count_jobs(status="completed", finished_before=start) == 0
    with pytest.raises(ValueError, match="timezone-aware"):
        backend.count_jobs(finished_after=datetime(2024, 1, 1))


def test_time_range_filters_check_their_values(backend: Backend) -> None:
    with pytest.raises(TypeError, match="created_after"):
        backend.list_jobs(created_after="yesterday")
    with pytest.raises(ValueError, match="timezone-aware"):
        backend.count_jobs(updated_before=datetime(2024, 1, 1))


def test_search_bounds_hold_at_the_edges_of_the_key_space(backend: Backend) -> None:
    """A prefix ends where the next character would start: keys just above it do not
    match, keys that extend it with the highest characters do."""
    # Not hex digits, so no random job id starts with any of these searches.
    keys = ["xy", "xy\U0010ffff", "xy\U0010ffffz", "xz", "xy\ud7ffx", "xy\ue000"]
    ids = {key: enqueue_id(backend, dedupe_key=key) for key in keys}

    def found(search: str) -> set[str]:
        return {j.dedupe_key or "" for j in backend.list_jobs(search=search)}

    assert found("xy") == {k for k in ids if k.startswith("xy")}
    assert found("xy\U0010ffff") == {k for k in ids if k.startswith("xy\U0010ffff")}
    assert found("xy\ud7ff") == {k for k in ids if k.startswith("xy\ud7ff")}
    assert backend.count_jobs(search="xz") == 1
    assert found("y") == set()


# -- broad searches: the walk of the newest jobs, the probes behind it, capped counts ---


def _mixed(backend: Backend, clock: FakeClock, n: int = 12) -> list[str]:
    """``n`` jobs, oldest first, whose dedupe keys alternate ``hit-i`` and ``miss-i``."""
    ids = []
    for i in range(n):
        ids.append(
            enqueue_id(backend, data={"n": i}, dedupe_key=f"{'hit' if i % 2 else 'miss'}-{i}")
        )
        clock.advance(1)
    return ids


def test_a_search_walk_looks_only_among_the_newest_jobs_of_the_list(
    backend: Backend, clock: FakeClock
) -> None:
    ids = _mixed(backend, clock)
    hits_newest_first = [ids[i] for i in (11, 9, 7, 5, 3, 1)]
    walked = JobFilter(search="hit-")
    assert isinstance(backend, StoreBase)
    found = backend.find_jobs(walked, JobPage(10, 0, newest=5))  # ids 11..7
    assert [j.id for j in found] == hits_newest_first[:3]
    assert [j.id for j in backend.find_jobs(walked, JobPage(2, 1, newest=5))] == (
        hits_newest_first[1:3]
    )
    assert backend.count_matching(walked, newest=5) == 3
    assert backend.count_matching(walked, newest=5, at_most=2) == 2
    assert backend.count_matching(walked) == 6
    # Other filters bound the list the walk goes through.
    other = enqueue_id(backend, "other", data={"n": 99}, dedupe_key="hit-other")
    assert [j.id for j in backend.find_jobs(walked, JobPage(10, 0, newest=1))] == [other]
    typed = JobFilter(type="t", search="hit-")
    assert [j.id for j in backend.find_jobs(typed, JobPage(10, 0, newest=1))] == [ids[11]]


def test_a_search_walk_of_the_failed_list_follows_the_failure_order(
    backend: Backend, clock: FakeClock
) -> None:
    first = enqueue_id(backend, data={"n": 1}, priority=2)
    second = enqueue_id(backend, data={"n": 2}, priority=1)
    enqueue_id(backend, data={"n": 3}, priority=0)
    # The first enqueued fails last: the failed list puts it first.
    assert claim_one(backend).fail_fatal("boom: disk") == "failed-terminal"
    clock.advance(1)
    assert claim_one(backend).id == second
    clock.advance(1)
    assert claim_one(backend).fail_fatal("boom: net") == "failed-terminal"
    failing = backend.get_job(first)
    assert failing is not None and failing.status == "failed"
    assert isinstance(backend, StoreBase)
    boom = JobFilter(status="failed", search="boom")
    assert [j.id for j in backend.find_jobs(boom, JobPage(5, 0, newest=1))] == [first]
    assert backend.count_matching(boom, newest=2) == 2


@pytest.mark.parametrize("walks", [(1, 1), (3, 3), (100, 100), (2, 5), (4, 12)])
def test_search_pages_are_the_same_whether_the_walk_fills_them_or_not(
    backend: Backend, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, walks: tuple[int, int]
) -> None:
    """The walk of the newest jobs only answers a page (or stops a count) it fills; any
    other page comes from the index probes: every page and count is the exact one either
    way. ``walks``: the short walk, and the long one for anything wanted."""
    short, long = walks
    monkeypatch.setattr(engine, "search_walk", lambda wanted: long if wanted else short)
    ids = _mixed(backend, clock)
    hits = [ids[i] for i in (11, 9, 7, 5, 3, 1)]
    for limit in (1, 2, 4):
        for offset in range(0, 7):
            page = [j.id for j in backend.list_jobs(search="hit-", limit=limit, offset=offset)]
            assert page == hits[offset : offset + limit], (limit, offset)
    assert backend.count_jobs(search="hit-") == 6
    for at_most in (1, 5, 6, 7, 50):
        assert backend.count_jobs(search="hit-", at_most=at_most) == min(6, at_most)


def test_count_jobs_at_most_stops_counting_there(backend: Backend) -> None:
    for n in range(5):
        enqueue_id(backend, data={"n": n})
    assert backend.count_jobs(at_most=3) == 3
    assert backend.count_jobs(at_most=5) == 5
    assert backend.count_jobs(at_most=9) == 5
    assert backend.count_jobs(status="pending", at_most=2) == 2
    assert backend.count_jobs(status="failed", at_most=2) == 0


@pytest.mark.parametrize("at_most", [0, -1, True, 2.5, "3"])
def test_a_bad_at_most_is_a_value_error(backend: Backend, at_most: Any) -> None:
    with pytest.raises(ValueError, match="at_most"):
        backend.count_jobs(at_most=at_most)


def test_among_newest_sorts_only_the_first_jobs_of_the_list_in_its_own_order(
    backend: Backend, clock: FakeClock
) -> None:
    """``among_newest=K``: the first K jobs of the list in its own order (the pending list:
    newest enqueued first), then sorted; ties newest first, pages and counts of those K."""
    keys: dict[str, str | None] = {"a": None, "f": "k-1", "c": None}
    ids = []
    for n, (type, key) in enumerate([*keys.items(), ("d", "k-3"), ("b", "k-4"), ("d", None)]):
        ids.append(enqueue_id(backend, type, data={"n": n}, dedupe_key=key))
        clock.advance(1)
    j3, j4, j5 = ids[3:]

    def listed(order: str | None, among: int, **more: Any) -> list[str]:
        jobs = backend.list_jobs(status="pending", order=order, among_newest=among, **more)
        return [j.id for j in jobs]

    # The whole list sorted by type starts with "a", the oldest: not among the newest 3.
    assert backend.list_jobs(status="pending", order="type")[0].id == ids[0]
    assert listed("type", 3) == [j4, j5, j3]  # "b", then the two "d" newest first
    assert listed("-type", 3) == [j5, j3, j4]
    assert listed("type", 3, limit=1, offset=1) == [j5]
    assert listed("run_at", 3) == [j3, j4, j5]  # an indexed sort: the same rule
    assert listed(None, 3) == [j5, j4, j3]  # no sort: the list's own order
    assert listed("type", 100) == [j.id for j in backend.list_jobs(status="pending", order="type")]
    # A search looks among those K only.
    assert listed("type", 3, search="k-") == [j4, j3]
    assert backend.count_jobs(status="pending", search="k-", among_newest=3) == 2
    assert backend.count_jobs(status="pending", among_newest=3) == 3
    assert backend.count_jobs(status="pending", among_newest=50) == 6
    assert backend.count_jobs(status="pending", among_newest=50, at_most=4) == 4
    # A list of every status: newest first.
    assert [j.id for j in backend.list_jobs(order="type", among_newest=2)] == [j4, j5]


def test_among_newest_of_a_finished_list_is_the_jobs_that_finished_last(
    backend: Backend, clock: FakeClock
) -> None:
    # Enqueued c0, c1, c2; claimed (lowest priority first) and finished c2, c1, c0.
    created = []
    for n in range(3):
        created.append(enqueue_id(backend, data={"n": n}, priority=3 - n))
        clock.advance(1)
    c0, c1, c2 = created
    for expected in (c2, c1, c0):
        clock.advance(1)
        handle = claim_one(backend)
        assert handle.id == expected
        assert handle.complete() == "completed"

    def listed(order: str, among: int) -> list[str]:
        jobs = backend.list_jobs(status="completed", order=order, among_newest=among)
        return [j.id for j in jobs]

    assert listed("-created_at", 2) == [c1, c0]  # c2 finished first: not among the last two
    assert listed("created_at", 2) == [c0, c1]
    assert listed("-created_at", 3) == [c2, c1, c0]
    assert listed("finished_at", 2) == [c1, c0]
    assert backend.count_jobs(status="completed", among_newest=2) == 2


@pytest.mark.parametrize("among", [0, -1, True, 2.5, "3"])
def test_a_bad_among_newest_is_a_value_error(backend: Backend, among: Any) -> None:
    with pytest.raises(ValueError, match="among_newest"):
        backend.list_jobs(order="type", among_newest=among)
    with pytest.raises(ValueError, match="among_newest"):
        backend.count_jobs(among_newest=among)
