"""Stop strings at derender: cut at the first stop string to complete, never emit a partial one,
and give the same result for any split of the text."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from session.stop import StopStrings


def _run(stops: list[str], pieces: list[str], include: bool = False) -> tuple[str, list[str], str | None]:
    s = StopStrings(stops, include_in_output=include)
    emitted: list[str] = []
    for p in pieces:
        emitted.append(s.feed(p))
        if s.matched is not None:
            return "".join(emitted), emitted, s.matched
    emitted.append(s.flush())
    return "".join(emitted), emitted, None


def test_a_stop_string_split_across_chunks_cuts_the_text_before_it() -> None:
    text, _, matched = _run(["STOP"], ["Hello ST", "O", "P and more"])
    assert (text, matched) == ("Hello ", "STOP")


def test_include_stop_str_in_output_keeps_the_matched_string() -> None:
    text, _, matched = _run(["\n\n"], ["one\n", "\ntwo"], include=True)
    assert (text, matched) == ("one\n\n", "\n\n")


def test_no_part_of_a_stop_string_is_emitted_before_it_completes() -> None:
    stops = ["</answer>", "###"]
    s = StopStrings(stops)
    shown = ""
    for ch in "text </ans and ## more </answer> tail":
        shown += s.feed(ch)
        assert "text </ans and ## more ".startswith(shown)  # always a prefix of the final text
    assert (shown, s.matched) == ("text </ans and ## more ", "</answer>")


def test_held_back_text_is_released_at_the_end_when_nothing_matched() -> None:
    text, emitted, matched = _run(["STOP"], ["all ST"])
    assert (text, matched) == ("all ST", None)
    assert emitted[-1] == " ST"  # the last hold (len("STOP") - 1 = 3 characters) comes at the end


def test_the_first_stop_string_to_complete_wins() -> None:
    # "abcd" starts first but "c" completes first, as an engine checking after each token sees it
    assert _run(["abcd", "c"], ["abcd"])[2] == "c"
    assert _run(["abcd", "c"], ["a", "b", "c", "d"])[2] == "c"


def test_the_state_is_at_most_the_longest_stop_string_minus_one() -> None:
    s = StopStrings(["<|stop|>", "x"])
    for ch in "a long stream of text <|sto":
        s.feed(ch)
        assert len(s.tail) <= s.hold == len("<|stop|>") - 1


@given(text=st.text(alphabet="ab\n<>/é🎉", max_size=60),
       stops=st.lists(st.text(alphabet="ab\n<>/é🎉", min_size=1, max_size=4), min_size=1, max_size=3),
       cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=12),
       include=st.booleans())
def test_any_split_gives_the_same_text_and_match(text: str, stops: list[str], cuts: list[int], include: bool) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    whole = _run(stops, [text], include)
    split = _run(stops, pieces, include)
    assert (split[0], split[2]) == (whole[0], whole[2])
