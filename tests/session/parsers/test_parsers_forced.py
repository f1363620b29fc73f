"""tool_choice named / required: the forced-call parsers (vLLM reads constrained JSON output for
these instead of running the model's tool parser)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers.base import ParserContext
from session.parsers.tool import NamedToolChoiceParser, RequiredToolChoiceParser

from .parsers_harness import AnyParser, Split, one_shot, random_splits, split_at, streamed

NAMED = ParserContext(tools=({"type": "function"},), tool_choice={"type": "function", "function": {"name": "get_weather"}})
NAMED_RESPONSES = ParserContext(tools=({"type": "function"},), tool_choice={"type": "function", "name": "get_weather"})
REQUIRED = ParserContext(tools=({"type": "function"},), tool_choice="required")

Vector = tuple[str, AnyParser, ParserContext, str, Split]
N, Rq = NamedToolChoiceParser, RequiredToolChoiceParser

VECTORS: list[Vector] = [
    ("named: the output is the arguments, raw", N, NAMED, '{"city": "Paris"}', Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("named: raw spacing kept", N, NAMED, '{ "city" :"東京" }', Split(calls=(("get_weather", '{ "city" :"東京" }'),))),
    ("named: responses-style tool_choice", N, NAMED_RESPONSES, "{}", Split(calls=(("get_weather", "{}"),))),
    ("named: an empty output is a call with empty arguments", N, NAMED, "", Split(calls=(("get_weather", ""),))),
    ("required: one call", Rq, REQUIRED, '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("required: two calls, re-serialized", Rq, REQUIRED,
     '[{"name":"a","parameters":{"x":[1,2]}},{"name":"b","parameters":{}}]', Split(calls=(("a", '{"x": [1, 2]}'), ("b", "{}")))),
    ("required: parameters absent or null", Rq, REQUIRED, '[{"name": "a"}, {"name": "b", "parameters": null}]',
     Split(calls=(("a", "null"), ("b", "null")))),
    ("required: extra keys allowed", Rq, REQUIRED, '[{"name": "a", "description": "x", "parameters": {}}]',
     Split(calls=(("a", "{}"),))),
    ("required: parameters not an object: nothing", Rq, REQUIRED, '[{"name": "a", "parameters": [1]}]', Split()),
    ("required: not a list: nothing", Rq, REQUIRED, '{"name": "a", "parameters": {}}', Split()),
    ("required: no name: nothing", Rq, REQUIRED, '[{"parameters": {}}]', Split()),
    ("required: whitespace around", Rq, REQUIRED, ' \n[ {"name": "a", "parameters": {"u": "ü"}} ]\n',
     Split(calls=(("a", '{"u": "ü"}'),))),
]

IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "cls", "ctx", "text", "expected"), VECTORS, ids=IDS)
def test_forced_vector_one_shot(label: str, cls: AnyParser, ctx: ParserContext, text: str, expected: Split) -> None:
    assert one_shot(cls, text, ctx) == expected


@pytest.mark.parametrize(("label", "cls", "ctx", "text", "expected"), VECTORS, ids=IDS)
def test_forced_vector_streamed_over_splits_with_state_round_trips(label: str, cls: AnyParser, ctx: ParserContext,
                                                                  text: str, expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(cls, chunks, ctx) == expected, chunks


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_forced_vectors_over_random_splits(data: st.DataObject) -> None:
    _, cls, ctx, text, expected = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=16))
    assert streamed(cls, split_at(text, cuts), ctx) == expected


def test_named_parser_needs_a_named_tool_choice() -> None:
    with pytest.raises(ValueError, match="named tool_choice"):
        NamedToolChoiceParser(REQUIRED)
