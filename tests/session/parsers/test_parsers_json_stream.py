"""The incremental JSON re-serializer behind the tool-call argument streams: what it emits over
any split equals ``json.dumps(json.loads(text), ensure_ascii=False)``, and it refuses exactly what
``json.loads`` refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.tool.json_stream import JSON_WS, JsonValueStreamer, canonical_number

from .parsers_harness import split_at

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def stream(text: str, chunks: list[str]) -> tuple[str, bool, int]:
    """(canonical output, failed, characters left after the value) over ``chunks`` of ``text``;
    the streamer goes through its JSON state between chunks."""
    streamer, out, consumed = JsonValueStreamer(), list[str](), 0
    for chunk in chunks:
        streamer = JsonValueStreamer.from_state(json.loads(json.dumps(streamer.to_state())))
        if streamer.done or streamer.failed:
            break
        consumed += streamer.feed(chunk, 0, out)
    streamer.end(out)
    return "".join(out), streamer.failed or not streamer.done, len(text) - consumed


def accepted_like_json_loads(text: str, chunks: list[str]) -> tuple[bool, str]:
    out, failed, _ = stream(text, chunks)
    if failed:
        return False, ""
    # like json.loads: only whitespace may follow the value
    streamer, sink = JsonValueStreamer(), list[str]()
    end = streamer.feed(text, 0, sink)
    streamer.end(sink)
    ok = text[end:].strip(JSON_WS) == ""
    return ok, out if ok else ""


def reference(text: str) -> tuple[bool, str]:
    try:
        return True, json.dumps(json.loads(text), ensure_ascii=False)
    except (ValueError, RecursionError):
        return False, ""


@settings(max_examples=300, deadline=None)
@given(value=json_values, indent=st.sampled_from([None, 0, 2]), ascii_=st.booleans(),
       separators=st.sampled_from([None, (",", ":"), (" , ", " : ")]), data=st.data())
def test_streamed_output_is_json_dumps_of_json_loads_for_any_split(value: Any, indent: int | None, ascii_: bool,
                                                                   separators: Any, data: st.DataObject) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_, separators=separators)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    out, failed, _ = stream(text, split_at(text, cuts))
    assert not failed
    assert out == json.dumps(json.loads(text), ensure_ascii=False)


JSONISH = st.lists(
    st.sampled_from([*'{}[]:,"\\/ \t\n-+.0123456789eEtrufalsnNIiy\u00e9\x01u', "\\u", "d83d", "de00", "true",
                     "null", "Infinity"]),
    max_size=30,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=JSONISH, data=st.data())
def test_accepts_and_refuses_exactly_what_json_loads_does(text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=6))
    assert accepted_like_json_loads(text, split_at(text, cuts)) == reference(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"\\ud83d"', '"\\ud83d"'),
        ('"\\ud83dx"', '"\\ud83dx"'),
        ('"\\ud83d\\u0041"', '"\\ud83dA"'),
        ('"\\udc00"', '"\\udc00"'),
        ('"\\ud83d\\ud83d\\ude00"', '"\\ud83d😀"'),
    ],
)
def test_lone_surrogates_stay_escaped_so_the_text_encodes_as_utf8(text: str, expected: str) -> None:
    out, failed, _ = stream(text, list(text))
    assert not failed and out == expected
    assert json.loads(out) == json.loads(text)  # the same value json.loads reads
    out.encode("utf-8")


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud83d\\ude00"',  # a surrogate pair becomes one character
        '[1.0, 1e3, -0, -0.0, 10.50, 1E400, -1e400, 123456789012345678901234567890]',
        "[NaN, Infinity, -Infinity, true, false, null]",
        '{"a": {"b": [[], {}]}, "": ""}',
        '"tab\\there \\"quoted\\" back\\\\slash \\/ \\b\\f\\n\\r \\u0000\\u001f\\u007f\\u2028"',
        '"東京 😀 naïve"',
    ],
)
def test_edge_values_match_json_one_character_at_a_time(text: str) -> None:
    out, failed, _ = stream(text, list(text))
    assert not failed
    assert out == json.dumps(json.loads(text), ensure_ascii=False)


@pytest.mark.parametrize(
    "text",
    ["[1,]", '{"a":1,}', "[01]", "[1.]", "[-]", "[tru]", '"a\nb"', '{"a" 1}', '{1: 2}', '"\\x"', '"\\u12g4"',
     "[" * 2000 + "]" * 2000],
)
def test_malformed_json_is_refused_like_json_loads(text: str) -> None:
    assert reference(text)[0] is False
    _, failed, _ = stream(text, [text])
    assert failed


def test_the_value_ends_where_json_would_stop_reading() -> None:
    streamer, out = JsonValueStreamer(), list[str]()
    text = '{"a": [1, 2]}  tail'
    end = streamer.feed(text, 0, out)
    assert streamer.done and text[end:] == "  tail"
    assert "".join(out) == '{"a": [1, 2]}'


def test_a_top_level_number_needs_a_following_character_or_the_end() -> None:
    streamer, out = JsonValueStreamer(), list[str]()
    assert streamer.feed("12", 0, out) == 2 and not streamer.done
    streamer.end(out)
    assert streamer.done and out == ["12"]


def test_canonical_number_refuses_what_int_cannot_read() -> None:
    assert canonical_number("1" * 5000) is None  # json.loads refuses it too (int digit limit)
    assert canonical_number("2.50") == "2.5"
    assert canonical_number("01") is None


def test_state_is_small_and_holds_no_consumed_text() -> None:
    streamer, out = JsonValueStreamer(), list[str]()
    streamer.feed('{"code": "' + "x" * 10_000, 0, out)
    assert len(json.dumps(streamer.to_state())) < 100
