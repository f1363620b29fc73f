"""llama4_pythonic (Llama 4 ``[f(a=1)]``, optionally in ``<|python_start|>`` … ``<|python_end|>``): vectors
with the split vLLM 0.32's Llama4PythonicToolParser gives (checked against its recorded answers in
tests/data/vllm/parsers/llama4_pythonic.json), one-shot and over random splits, a property over
fragments of the format, vLLM 0.32's argument literals, and the state bound."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import TOOL_PARSERS
from session.parsers.tool.llama4_pythonic import Llama4PythonicToolParser
from session.parsers.tool.pythonic import PythonicToolParser, keyword_argument

from .parsers_harness import AUTO, Split, one_shot, random_splits, split_at, streamed

P = Llama4PythonicToolParser
PS, PE = "<|python_start|>", "<|python_end|>"
PARIS = ("get_weather", '{"city": "Paris"}')

VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "The capital of France is Paris.", Split(content="The capital of France is Paris.")),
    ("one call", '[get_weather(city="Paris")]', Split(calls=(PARIS,))),
    ("wrapped in the markers", f'{PS}[get_weather(city="Paris")]{PE}', Split(calls=(PARIS,))),
    ("the start marker alone", f'{PS}[get_weather(city="Paris")]', Split(calls=(PARIS,))),
    ("two calls", f'{PS}[get_weather(city="Paris"), get_time()]{PE}', Split(calls=(PARIS, ("get_time", "{}")))),
    ("<|python_end|> inside a string is removed too", f'{PS}[echo(text="a{PE}b")]{PE}',
     Split(calls=(("echo", '{"text": "ab"}'),))),
    ("after the marker, text that is not a list is content as written", f"{PS}I cannot.{PE}",
     Split(content=f"{PS}I cannot.{PE}")),
    ("after the marker, a broken list is content as written", f"{PS}[get_weather(city=Paris)]{PE}",
     Split(content=f"{PS}[get_weather(city=Paris)]{PE}")),
    ("the marker alone is content", PS, Split(content=PS)),
    ("a partial marker is content", "<|python_sta", Split(content="<|python_sta")),
    ("without the start marker, <|python_end|> after the list is dropped with the rest",
     f'[get_weather(city="Paris")]{PE}', Split(calls=(PARIS,))),
    ("without the start marker, a marker in the content stays", f"Use {PE} here", Split(content=f"Use {PE} here")),
    ("negative numbers are literals to vLLM 0.32", "[f(a=-1, b=+2.5, c=-0)]",
     Split(calls=(("f", '{"a": -1, "b": 2.5, "c": 0}'),))),
    ("tuples and sets are lists", "[f(a=(1, 2), b={3})]", Split(calls=(("f", '{"a": [1, 2], "b": [3]}'),))),
    ("JSON names and plain f-strings", "[f(a=true, b=null, c=false, d=f'x')]",
     Split(calls=(("f", '{"a": true, "b": null, "c": false, "d": "x"}'),))),
    ("an f-string with a placeholder is not a literal", "[f(a=f'{x}')]", Split(content="[f(a=f'{x}')]")),
    ("a positional argument is not a call", '[get_weather("Paris")]', Split(content='[get_weather("Paris")]')),
    ("cut inside the first argument: content", '[get_weather(city="Par', Split(content='[get_weather(city="Par')),
    ("cut after the first argument keeps the call", f'{PS}[get_weather(city="Paris", days=',
     Split(calls=(("get_weather", '{"city": "Paris"'),))),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=IDS)
def test_vectors_one_shot_and_streamed(label: str, text: str, expected: Split) -> None:
    assert one_shot(P, text) == expected
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks) == expected, chunks


def test_registered_and_like_vllm_without_special_tokens() -> None:
    assert TOOL_PARSERS["llama4_pythonic"] is P
    assert P.needs_special_tokens is False


def test_pythonic_reads_the_same_literals() -> None:
    assert keyword_argument("a=-1") == ("a", "-1")
    assert one_shot(PythonicToolParser, "[f(a=-1)]") == Split(calls=(("f", '{"a": -1}'),))


FRAGMENTS = [PS, PE, "<|python_", "_end|>", "[", "]", "(", ")", ",", "=", '"', "'", "\\", "#", " ", "\n", "f(",
             "g(a=", "get_weather(city=", '"Paris"', "1", "-2.5", "True", "null", "(1, 2)", "{3}", "x", "東京", "😀"]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_split_with_state_round_trips_equals_one_shot(data: st.DataObject) -> None:
    text = "".join(data.draw(st.lists(st.sampled_from(FRAGMENTS), max_size=40)))
    expected = one_shot(P, text)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(P, split_at(text, cuts)) == expected


@pytest.mark.parametrize("text", [
    PS + "[" + ", ".join(['get_weather(city="Paris", days=3)'] * 1500) + "]" + PE,  # many calls
    PS + "Not a call list, long content. " * 700 + PE,  # fallen back after the marker
    "Plain content, no marker. " * 800,
], ids=["calls", "fallback", "content"])
def test_state_does_not_grow_with_the_output(text: str) -> None:
    # (a single keyword argument is held until it ends, as pythonic holds it: ast reads it whole)
    parser = P(AUTO)
    for k in range(0, len(text), 7):
        parser.feed(text[k:k + 7])
        assert len(json.dumps(parser.snapshot())) < 1024
        if k % 700 == 0:
            parser = P.restore(AUTO, json.loads(json.dumps(parser.snapshot())))
    parser.finish()
