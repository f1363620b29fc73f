"""The JSON nesting bound (``engine/json_depth.py``) and the render-size measure that never serializes
a body again (``server.render_work.json_size``), issue 39 item 3."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.json_depth import MAX_JSON_DEPTH, field_name, too_deep
from server.render_work import INLINE_MAX_BODY_BYTES, json_size
from session.client_frames import FrameError, decode_client_frame


def nested(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for k in range(levels):
        value = {"a": value} if k % 2 else [value]
    return value


def test_too_deep_counts_the_top_level_as_level_one_and_names_the_first_container_past_the_limit() -> None:
    assert too_deep(nested(MAX_JSON_DEPTH)) is None
    path = too_deep({"tools": [{"function": {"parameters": nested(MAX_JSON_DEPTH)}}]})
    assert path is not None and len(path) == MAX_JSON_DEPTH
    assert field_name(path) == "tools[0].function.parameters.a[0].a[0]…"
    assert too_deep([[1, 2], [3, [4]]], 2) == [1, 1]
    assert too_deep("text") is None and too_deep([1, 2, 3], 1) is None


def test_few_brackets_in_the_text_skip_the_walk() -> None:
    class Untouchable(dict):  # type: ignore[type-arg]
        def values(self) -> Any:
            raise AssertionError("walked")

    assert too_deep(Untouchable(a=1), raw=b'{"a": 1}') is None
    assert too_deep(Untouchable(a=1), raw='{"a": 1}') is None


def test_a_frame_nested_past_the_bound_is_an_invalid_frame_naming_the_field() -> None:
    text = '{"type":"chat","id":"c","event_id":"e","body":{"messages":' + "[" * 300 + "]" * 300 + "}}"
    with pytest.raises(FrameError) as info:
        decode_client_frame(text)
    err = info.value
    assert (err.code, err.request_id, err.event_id) == ("invalid_frame", "c", "e")
    assert err.param == "body.messages[0][0][0][0][0][0]"
    assert f"deeper than {MAX_JSON_DEPTH} levels" in err.message


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(st.characters(min_codepoint=32,
                                                                                      max_codepoint=126,
                                                                                      exclude_characters='"\\')),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text("abc", max_size=3), inner, max_size=5),
    max_leaves=30)


@given(JSON_VALUES)
def test_json_size_is_the_compact_json_size_of_plain_text(value: Any) -> None:
    assert json_size(value, 10**9) == len(orjson.dumps(value))


def test_json_size_measures_what_orjson_cannot_serialize_and_stops_past_the_limit() -> None:
    deep = nested(1000)
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(deep)
    assert json_size(deep) > INLINE_MAX_BODY_BYTES  # 1,000 levels of brackets
    assert json_size({"messages": [{"content": "x" * 10**6}]}) > INLINE_MAX_BODY_BYTES

    class Unvisited:
        def __repr__(self) -> str:
            raise AssertionError("visited past the limit")

    assert json_size({"prompt": [*[[1]] * 600, *[Unvisited()] * 10**5]}) > INLINE_MAX_BODY_BYTES
    assert json_size([[Unvisited()] * 10] * 10**5) > INLINE_MAX_BODY_BYTES
    small = {"messages": [{"role": "user", "content": "hi"}]}
    assert json_size(small) == len(orjson.dumps(small)) == 45
