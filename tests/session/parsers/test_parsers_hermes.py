"""hermes (Qwen2.5 / Qwen3 ``<tool_call>{json}</tool_call>``): vectors written from the format Qwen's
chat templates teach, with the split vLLM's Hermes2ProToolParser gives (and, where a stream cannot
match it, the documented behaviour), checked one-shot and over random splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.tool import HermesToolParser

from .parsers_harness import Split, one_shot, random_splits, split_at, streamed

P = HermesToolParser
W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'

VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "The capital of France is Paris.", Split(content="The capital of France is Paris.")),
    ("one call, nothing else", f"<tool_call>\n{W}\n</tool_call>",
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("content before the call", f"Let me check the weather.\n<tool_call>\n{W}\n</tool_call>",
     Split(content="Let me check the weather.\n", calls=(("get_weather", '{"city": "Paris"}'),))),
    ("two parallel calls",
     f'<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{{"name": "get_time", "arguments": {{"tz": "CET"}}}}\n</tool_call>',
     Split(calls=(("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')))),
    ("text after the calls is dropped", f"<tool_call>\n{W}\n</tool_call>\nI have called the tool.",
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("nested JSON arguments, re-serialized",
     '<tool_call>\n{"name": "search", "arguments": {"filter":{"and":[{"x":1},{"y":[true,null]}]},"limit":10}}\n</tool_call>',
     Split(calls=(("search", '{"filter": {"and": [{"x": 1}, {"y": [true, null]}]}, "limit": 10}'),))),
    ("unicode arguments, escapes decoded like json.loads",
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "\\u6771\\u4eac", "note": "naïve ☕ \\ud83d\\ude00"}}\n</tool_call>',
     Split(calls=(("get_weather", '{"city": "東京", "note": "naïve ☕ 😀"}'),))),
    ("a string holding the end marker stays in the string",
     '<tool_call>\n{"name": "echo", "arguments": {"text": "write </tool_call> literally"}}\n</tool_call>',
     Split(calls=(("echo", '{"text": "write </tool_call> literally"}'),))),
    ("empty arguments", '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',
     Split(calls=(("list_files", "{}"),))),
    ("a repeated name: the last one counts, as json.loads reads it",
     '<tool_call>{"name": "a", "name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("arguments before the name", '<tool_call>{"arguments": {"a": [1, 2]}, "name": "f"}</tool_call>',
     Split(calls=(("f", '{"a": [1, 2]}'),))),
    ("pretty-printed JSON and number forms are canonicalized",
     '<tool_call>\n{\n  "name": "calc",\n  "arguments": {\n    "x": 1.0, "y": 1e3, "z": -0, "w": 10.50\n  }\n}\n</tool_call>',
     Split(calls=(("calc", '{"x": 1.0, "y": 1000.0, "z": 0, "w": 10.5}'),))),
    ("broken JSON in the only block: all of it is content",
     'Checking.<tool_call>\n{"name": "get_weather", "arguments" {"city": "Paris"}}\n</tool_call>',
     Split(content='Checking.<tool_call>\n{"name": "get_weather", "arguments" {"city": "Paris"}}\n</tool_call>')),
    ("unquoted keys: all of it is content", "<tool_call>\n{name: 'get_weather'}\n</tool_call>",
     Split(content="<tool_call>\n{name: 'get_weather'}\n</tool_call>")),
    ("JSON that breaks after the arguments started keeps the call (vLLM's streaming does too)",
     'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>',
     Split(content="Checking.", calls=(("get_weather", '{"city": "Paris"'),))),
    ("no arguments member: all of it is content", '<tool_call>\n{"name": "get_weather"}\n</tool_call>',
     Split(content='<tool_call>\n{"name": "get_weather"}\n</tool_call>')),
    ("an empty block: all of it is content", "<tool_call></tool_call>", Split(content="<tool_call></tool_call>")),
    ("a name that is not a string: all of it is content", '<tool_call>{"name": 3, "arguments": {}}</tool_call>',
     Split(content='<tool_call>{"name": 3, "arguments": {}}</tool_call>')),
    ("unclosed last block with complete JSON counts", f"<tool_call>\n{W}\n",
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("output cut inside the arguments keeps the streamed prefix",
     '<tool_call>\n{"name": "write", "arguments": {"path": "a.txt", "text": "hel',
     Split(calls=(("write", '{"path": "a.txt", "text": "hel'),))),
    ("a broken block after a call is dropped",
     f'<tool_call>{W}</tool_call>\n<tool_call>{{oops}}</tool_call>\n<tool_call>{{"name": "g", "arguments": {{}}}}</tool_call>',
     Split(calls=(("get_weather", '{"city": "Paris"}'), ("g", "{}")))),
    ("a function the request did not list is still a call (vLLM does not check names)",
     '<tool_call>{"name": "not_a_tool", "arguments": {"q": 1}}</tool_call>', Split(calls=(("not_a_tool", '{"q": 1}'),))),
    ("a lone surrogate escape stays escaped in arguments and becomes U+FFFD in a name",
     '<tool_call>{"name": "f\\ud83d", "arguments": {"s": "\\ud83d!"}}</tool_call>',
     Split(calls=(("f\ufffd", '{"s": "\\ud83d!"}'),))),
    ("a partial marker at the end is content", "Use the <tool_c", Split(content="Use the <tool_c")),
    ("a marker-like text that is not a marker", "a <tool_cal> b <tool_call", Split(content="a <tool_cal> b <tool_call")),
    ("garbage between the JSON and the end tag keeps the call",
     f"<tool_call>{W} trailing</tool_call>", Split(calls=(("get_weather", '{"city": "Paris"}'),))),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_hermes_vector_one_shot(label: str, text: str, expected: Split) -> None:
    assert one_shot(P, text) == expected


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_hermes_vector_streamed_over_splits_with_state_round_trips(label: str, text: str, expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks) == expected, chunks


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_hermes_vectors_over_random_splits(data: st.DataObject) -> None:
    _, text, expected = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=24))
    assert streamed(P, split_at(text, cuts)) == expected


def test_hermes_keeps_special_tokens_off() -> None:
    # Qwen's <tool_call> is an added token that is not special: plain decoding keeps it.
    assert P.needs_special_tokens is False
