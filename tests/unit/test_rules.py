def test_the_upper_bound_of_a_prefix_is_the_next_string_above_all_that_start_with_it() -> None:
    from durabl.model.rules import prefix_upper_bound

    assert prefix_upper_bound("ab") == "ac"
    assert prefix_upper_bound("a\U0010ffff") == "b"  # the last character cannot step up
    assert prefix_upper_bound("a\ud7ff") == "a\ue000"  # past the surrogates
    assert prefix_upper_bound("\U0010ffff\U0010ffff") is None
    assert prefix_upper_bound("") is None
    for key in ("ab", "ab\U0010ffff", "abz" * 3):
        assert "ab" <= key < "ac"
