"""pythonic (``[f(a=1, b="x"), g()]``): vectors with the split vLLM's PythonicToolParser gives,
one-shot and over random splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.tool import PythonicToolParser
from session.parsers.tool.pythonic import keyword_argument

from .parsers_harness import Split, one_shot, random_splits, split_at, streamed

P = PythonicToolParser

VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "Paris is the capital of France.", Split(content="Paris is the capital of France.")),
    ("one call", '[get_weather(city="Paris")]', Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("two calls", '[get_weather(city="Paris", unit=\'celsius\'), get_time(tz="CET")]',
     Split(calls=(("get_weather", '{"city": "Paris", "unit": "celsius"}'), ("get_time", '{"tz": "CET"}')))),
    ("no arguments", "[list_files()]", Split(calls=(("list_files", "{}"),))),
    ("lists, dicts, None, True, False",
     "[f(a=[1, {'k': None}], b=True, c=False, d={1: 'one', 'x': [[]]})]",
     Split(calls=(("f", '{"a": [1, {"k": null}], "b": true, "c": false, "d": {"1": "one", "x": [[]]}}'),))),
    ("numbers as Python reads them", "[f(a=1.5e3, b=0x10, c=1_000, d=2.50)]",
     Split(calls=(("f", '{"a": 1500.0, "b": 16, "c": 1000, "d": 2.5}'),))),
    ("strings with brackets, commas and quotes",
     '[f(a="x, y)]", b=\'it\\\'s\', c="""tri\'\'ple "q" """)]',
     Split(calls=(("f", '{"a": "x, y)]", "b": "it\'s", "c": "tri\'\'ple \\"q\\" "}'),))),
    ("a lone surrogate stays escaped", '[f(s="\\ud83d")]', Split(calls=(("f", '{"s": "\\ud83d"}'),))),
    ("unicode", '[translate(text="東京 😀", to="ja")]', Split(calls=(("translate", '{"text": "東京 😀", "to": "ja"}'),))),
    ("spread over lines with a comment", "[\n  f(\n    a=1,  # the first\n    b=2,\n  ),\n  g()\n]",
     Split(calls=(("f", '{"a": 1, "b": 2}'), ("g", "{}")))),
    ("not starting with [ : content", 'Sure: [get_weather(city="Paris")]',
     Split(content='Sure: [get_weather(city="Paris")]')),
    ("a positional argument: all of it is content", "[f(1)]", Split(content="[f(1)]")),
    ("signed numbers, tuples, sets and JSON names are literals to vLLM 0.32", "[f(a=-1, b=(1, 2), c={3}, d=true)]",
     Split(calls=(("f", '{"a": -1, "b": [1, 2], "c": [3], "d": true}'),))),
    ("an expression: all of it is content", "[f(a=1+2)]", Split(content="[f(a=1+2)]")),
    ("an empty list: content", "[]", Split(content="[]")),
    ("a list of non-calls: content", "[1, 2, 3]", Split(content="[1, 2, 3]")),
    ("a keyword as the name: content", "[if(a=1)]", Split(content="[if(a=1)]")),
    ("a dotted name: content", "[math.sqrt(x=2)]", Split(content="[math.sqrt(x=2)]")),
    ("text after the list is dropped", "[f(a=1)]\nI called f.", Split(calls=(("f", '{"a": 1}'),))),
    ("a trailing comma inside the call", "[f(a=1,)]", Split(calls=(("f", '{"a": 1}'),))),
    ("output cut inside a call keeps what is complete", '[f(a=1, b="unfinis',
     Split(calls=(("f", '{"a": 1'),))),
    ("output cut before any argument completes: content", '[f(a="unfinis', Split(content='[f(a="unfinis')),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_pythonic_vector_one_shot(label: str, text: str, expected: Split) -> None:
    assert one_shot(P, text) == expected


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_pythonic_vector_streamed_over_splits_with_state_round_trips(label: str, text: str, expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks) == expected, chunks


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_pythonic_vectors_over_random_splits(data: st.DataObject) -> None:
    _, text, expected = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=24))
    assert streamed(P, split_at(text, cuts)) == expected


@pytest.mark.parametrize("segment", ["a=b'x'", "a=1j", "a=...", "a=-True", "a=f'{x}'", "**kw", "a=f(1)", "a=1, b=2"])
def test_pythonic_refuses_what_vllm_refuses_in_one_argument(segment: str) -> None:
    assert keyword_argument(segment) is None
