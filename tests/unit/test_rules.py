from datetime import datetime, timedelta, timezone

from durabl.model.options import build_new_job
from durabl.model.rules import HolderUpdate, debounced_run_at, holder_update


def test_the_upper_bound_of_a_prefix_is_the_next_string_above_all_that_start_with_it() -> None:
    from durabl.model.rules import prefix_upper_bound

    assert prefix_upper_bound("ab") == "ac"
    assert prefix_upper_bound("a\U0010ffff") == "b"  # the last character cannot step up
    assert prefix_upper_bound("a\ud7ff") == "a\ue000"  # past the surrogates
    assert prefix_upper_bound("\U0010ffff\U0010ffff") is None
    assert prefix_upper_bound("") is None
    for key in ("ab", "ab\U0010ffff", "abz" * 3):
        assert "ab" <= key < "ac"


def test_a_search_walks_twenty_jobs_per_match_it_wants_within_its_bounds() -> None:
    from durabl.model.rules import SEARCH_WALK, search_walk

    least, most = SEARCH_WALK
    assert search_walk(0) == least
    assert search_walk(50) == max(least, 1_000)
    assert search_walk(500) == 10_000
    assert search_walk(1_001) == most
    assert search_walk(10**9) == most


def test_a_taken_slot_updates_its_holder_only_to_coalesce_or_debounce() -> None:
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    plain = build_new_job("t", {}, dedupe_key="k")
    assert holder_update(plain) is None
    assert holder_update(build_new_job("t", {}, dedupe_key="k", coalesce="latest")) == (
        HolderUpdate(replace_data=True, push_to=None, within=None)
    )
    pushed = build_new_job("t", {}, dedupe_key="k", debounce=5, debounce_max=20, now=now)
    assert holder_update(pushed) == HolderUpdate(False, now + timedelta(seconds=5), 20.0)


def test_a_debounce_push_is_bounded_past_the_first_enqueue_and_never_earlier() -> None:
    first = datetime(2030, 1, 1, tzinfo=timezone.utc)
    at = first + timedelta(seconds=30)  # the job's run_at before the push
    unbounded = HolderUpdate(False, first + timedelta(seconds=40), None)
    assert debounced_run_at(unbounded, at, first) == first + timedelta(seconds=40)
    bounded = HolderUpdate(False, first + timedelta(seconds=40), 35.0)
    assert debounced_run_at(bounded, at, first) == first + timedelta(seconds=35)
    past_the_bound = HolderUpdate(False, first + timedelta(seconds=40), 20.0)
    assert debounced_run_at(past_the_bound, at, first) == at  # never earlier
    earlier = HolderUpdate(False, first + timedelta(seconds=10), None)
    assert debounced_run_at(earlier, at, first) == at
    assert debounced_run_at(HolderUpdate(True, None, None), at, first) == at
