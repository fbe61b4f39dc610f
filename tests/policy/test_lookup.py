"""Draft guesses by prompt lookup: what followed the latest earlier match of the row's end."""

from __future__ import annotations

from agenttrain.policy.lookup import PromptLookup


def test_a_draft_continues_the_latest_earlier_occurrence_of_the_longest_suffix():
    # "5 6" occurred twice before; the later one was followed by 9 9, the earlier by 7 8.
    lookup = PromptLookup([5, 6, 7, 8, 1, 5, 6, 9, 9, 2, 5, 6])
    assert lookup.draft(2) == [9, 9]
    # The longest suffix wins over a later match of a shorter one: "1 2 3" -> 4, not "3" -> 0.
    lookup = PromptLookup([1, 2, 3, 4, 3, 0, 1, 2, 3])
    assert lookup.draft(1) == [4]


def test_a_draft_is_at_most_the_count_asked_and_empty_without_a_match():
    lookup = PromptLookup([1, 2, 3, 1])
    assert lookup.draft(10) == [2, 3, 1]
    assert lookup.draft(0) == []
    assert PromptLookup([1, 2, 3]).draft(4) == []
    assert PromptLookup().draft(4) == []


def test_tokens_added_later_are_matched_like_the_first_ones():
    lookup = PromptLookup([7, 8])
    lookup.extend([9, 7])
    assert lookup.draft(3) == [8, 9, 7]
    lookup.extend([8, 4])
    assert lookup.draft(2) == []  # "4" never occurred before
    lookup.extend([7, 8])
    assert lookup.draft(1) == [4]  # the latest "7 8" was followed by 4
