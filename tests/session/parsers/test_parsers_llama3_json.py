"""llama3_json (Llama 3.x JSON tool calls, ``<|python_tag|>`` optional, ``;``-separated objects):
vectors with the split vLLM's Llama3JsonToolParser gives, one-shot and over random splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.tool import Llama3JsonToolParser

from .parsers_harness import Split, one_shot, random_splits, split_at, streamed

P = Llama3JsonToolParser
TAG = "<|python_tag|>"

VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "Paris is the capital of France.", Split(content="Paris is the capital of France.")),
    ("one call with parameters", '{"name": "get_weather", "parameters": {"city": "Paris"}}',
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("one call with arguments", '{"name": "get_weather", "arguments": {"city": "Paris"}}',
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("python_tag first", f'{TAG}{{"name": "get_weather", "parameters": {{"city": "Paris"}}}}',
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("two calls separated by ;",
     '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {"tz": "CET"}}',
     Split(calls=(("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')))),
    ("leading whitespace", '\n\n{"name": "f", "parameters": {}}', Split(calls=(("f", "{}"),))),
    ("nested and unicode arguments re-serialized",
     '{"name": "book", "parameters": {"guests":[{"name":"Zoë","age":7}],"city":"\\u6771\\u4eac","ok":true}}',
     Split(calls=(("book", '{"guests": [{"name": "Zoë", "age": 7}], "city": "東京", "ok": true}'),))),
    ("strings holding braces and separators",
     '{"name": "run", "parameters": {"code": "if (a) { b(); }; c;"}}',
     Split(calls=(("run", '{"code": "if (a) { b(); }; c;"}'),))),
    ("the name after the parameters", '{"parameters": {"x": 1}, "name": "f"}', Split(calls=(("f", '{"x": 1}'),))),
    ("text after the calls is dropped", '{"name": "f", "parameters": {}}\nDone. {not json}',
     Split(calls=(("f", "{}"),))),
    ("JSON that is not a call: all of it is content", '{"answer": 42}', Split(content='{"answer": 42}')),
    ("a call without parameters: all of it is content", '{"name": "f"}', Split(content='{"name": "f"}')),
    ("broken JSON before the parameters: all of it is content", '{"name" "f", "parameters": {}}',
     Split(content='{"name" "f", "parameters": {}}')),
    ("python_tag with code, not JSON: all of it is content", f"{TAG}print('hi')", Split(content=f"{TAG}print('hi')")),
    ("prose before the JSON stays content (as vLLM's streaming decides)",
     'Sure! {"name": "f", "parameters": {}}', Split(content='Sure! {"name": "f", "parameters": {}}')),
    ("output cut inside the parameters keeps the streamed prefix", '{"name": "f", "parameters": {"q": "pari',
     Split(calls=(("f", '{"q": "pari'),))),
    ("only whitespace", "  \n", Split(content="  \n")),
    ("empty output", "", Split()),
    ("a partial python_tag that turns into text", "<|python", Split(content="<|python")),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_llama3_json_vector_one_shot(label: str, text: str, expected: Split) -> None:
    assert one_shot(P, text) == expected


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_llama3_json_vector_streamed_over_splits_with_state_round_trips(label: str, text: str,
                                                                       expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks) == expected, chunks


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_llama3_json_vectors_over_random_splits(data: st.DataObject) -> None:
    _, text, expected = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=24))
    assert streamed(P, split_at(text, cuts)) == expected
