"""mistral (``[TOOL_CALLS]`` then a JSON list, or ``name[ARGS]{...}`` per call): vectors with the
split vLLM's MistralToolParser gives, one-shot and over random splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.tool import MistralToolParser

from .parsers_harness import Split, one_shot, random_splits, split_at, streamed

P = MistralToolParser
B = "[TOOL_CALLS]"

VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "Paris is the capital of France.", Split(content="Paris is the capital of France.")),
    ("list form, one call", f'{B}[{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}]',
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("list form, two calls, re-serialized",
     f'{B}[{{"name":"get_weather","arguments":{{"city":"Paris"}}}},{{"name":"get_time","arguments":{{"tz":"CET"}}}}]',
     Split(calls=(("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')))),
    ("content before the marker", f'Let me look.{B}[{{"name": "f", "arguments": {{}}}}]',
     Split(content="Let me look.", calls=(("f", "{}"),))),
    ("list form without arguments gets {}", f'{B}[{{"name": "ping"}}]', Split(calls=(("ping", "{}"),))),
    ("list form, nested and unicode", f'{B} [{{"name": "note", "arguments": {{"text": "Grüße \\u2603", "tags": [["a"], []]}}}}]',
     Split(calls=(("note", '{"text": "Grüße ☃", "tags": [["a"], []]}'),))),
    ("list form, a marker inside a string stays in it", f'{B}[{{"name": "echo", "arguments": {{"s": "{B}"}}}}]',
     Split(calls=(("echo", '{"s": "[TOOL_CALLS]"}'),))),
    ("list form, text after the list is dropped", f'{B}[{{"name": "f", "arguments": {{}}}}] trailing words',
     Split(calls=(("f", "{}"),))),
    ("list form, an empty list", f"Nothing to do.{B}[]", Split(content="Nothing to do.")),
    ("list form, broken JSON falls back to content", f'Hi{B}[{{"name": "f", oops}}]',
     Split(content='Hi[{"name": "f", oops}]')),
    ("v11 form with [ARGS]", f'{B}get_weather[ARGS]{{"city": "Paris"}}', Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("v11 form, two calls", f'{B}get_weather[ARGS]{{"city": "Paris"}}{B}get_time[ARGS]{{"tz": "CET"}}',
     Split(calls=(("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')))),
    ("v11 form without [ARGS]", f'{B}get_weather{{"city": "Paris"}}', Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("v11 arguments are kept raw, as vLLM keeps them", f'{B}f[ARGS]{{"a":1,  "b" : [ 2 ]}}',
     Split(calls=(("f", '{"a":1,  "b" : [ 2 ]}'),))),
    ("v11 badly formatted arguments are still a call", f"{B}f[ARGS]{{not json", Split(calls=(("f", "{not json"),))),
    ("v11 segment without arguments is skipped", f'Ok {B}lonely{B}f{{"x": 1}}', Split(content="Ok ", calls=(("f", '{"x": 1}'),))),
    ("one object after the marker reads as a one-call list", f'{B}{{"name": "f", "arguments": {{"x": [1]}}}}',
     Split(calls=(("f", '{"x": [1]}'),))),
    ("a partial marker at the end is content", "The token [TOOL_CA", Split(content="The token [TOOL_CA")),
    ("list form cut inside the arguments keeps the streamed prefix", f'{B}[{{"name": "f", "arguments": {{"q": "pa',
     Split(calls=(("f", '{"q": "pa'),))),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_mistral_vector_one_shot(label: str, text: str, expected: Split) -> None:
    assert one_shot(P, text) == expected


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_mistral_vector_streamed_over_splits_with_state_round_trips(label: str, text: str, expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks) == expected, chunks


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mistral_vectors_over_random_splits(data: st.DataObject) -> None:
    _, text, expected = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=24))
    assert streamed(P, split_at(text, cuts)) == expected


def test_mistral_needs_special_tokens_and_mistral_call_ids() -> None:
    assert P.needs_special_tokens is True  # [TOOL_CALLS] is a special token
    assert P.call_id_style == "mistral"  # 9 alphanumerics, what Mistral templates accept
