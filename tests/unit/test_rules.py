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
