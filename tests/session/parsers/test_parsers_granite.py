"""granite (Granite 3.x ``<|tool_call|>[{…}, …]``) and granite4 (Granite 4 ``<tool_call>{…}</tool_call>``):
vectors with the split vLLM 0.32 gives (read from its engine grammar / Granite4ToolParser and checked
against its recorded answers in tests/data/vllm/parsers/granite.json), one-shot and over random splits,
a property over fragments of the formats, and the state bound."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import TOOL_PARSERS
from session.parsers.base import ParserContext
from session.parsers.tool.granite import Granite4ToolParser, GraniteToolParser

from .parsers_harness import AUTO, Split, one_shot, random_splits, split_at, streamed

G3 = GraniteToolParser
G4 = Granite4ToolParser
TOK = "<|tool_call|>"
W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
T = '{"name": "get_time", "arguments": {}}'
PARIS = ("get_weather", '{"city": "Paris"}')

G3_VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "The capital of France is Paris.", Split(content="The capital of France is Paris.")),
    ("one call", f"{TOK}[{W}]", Split(calls=(PARIS,))),
    ("the Granite 3.1 text marker", f"<tool_call> [{W}]", Split(calls=(PARIS,))),
    ("two calls, whitespace and commas skipped", f"{TOK}[ {W} ,\n {T} ]", Split(calls=(PARIS, ("get_time", "{}")))),
    ("content before the call; trailing whitespace stripped", f"Let me check.\n{TOK}[{W}]",
     Split(content="Let me check.", calls=(PARIS,))),
    ("whitespace-only content before a call is dropped", f"\n {TOK}[{W}]", Split(calls=(PARIS,))),
    ("arguments are the raw text of the object, verbatim",
     TOK + '[{"name":"get_weather","arguments":{"city":"Paris","days":3}}]',
     Split(calls=(("get_weather", '{"city":"Paris","days":3}'),))),
    ("escapes stay as written", TOK + '[{"name": "echo", "arguments": {"text": "\\u6771 \\"q\\" \\\\"}}]',
     Split(calls=(("echo", '{"text": "\\u6771 \\"q\\" \\\\"}'),))),
    ("nested arguments", TOK + '[{"name": "s", "arguments": {"f": {"and": [{"x": 1}, {"y": "}"}]}}}]',
     Split(calls=(("s", '{"f": {"and": [{"x": 1}, {"y": "}"}]}}'),))),
    ("arguments before the name", TOK + '[{"arguments": {"city": "Paris"}, "name": "get_weather"}]',
     Split(calls=(PARIS,))),
    ("no arguments member: {}", TOK + '[{"name": "get_time"}]', Split(calls=(("get_time", "{}"),))),
    ("parameters is not arguments: {}", TOK + '[{"name": "f", "parameters": {"a": 1}}]', Split(calls=(("f", "{}"),))),
    ("the name is vLLM's regex match, not JSON-decoded", TOK + '[{"name": "caf\\u00e9", "arguments": {}}]',
     Split(calls=(("caf\\u00e9", "{}"),))),
    ("the first name-like member wins, even inside the arguments",
     TOK + '[{"arguments": {"name": "Bob"}, "name": "greet"}]', Split(calls=(("Bob", '{"name": "Bob"}'),))),
    ("an element without a name is no call", TOK + '[{"arguments": {"a": 1}}]', Split()),
    ("an empty name is no call", TOK + '[{"name": "", "arguments": {}}]', Split()),
    ("a marker not followed by a list: the marker is dropped, the rest is content", f"{TOK}{W}", Split(content=W)),
    ("junk in the list ends it: the rest is content", f"{TOK}[{W}, oops]", Split(content="oops]", calls=(PARIS,))),
    ("text after the list is content", f"Sure.\n{TOK}[{W}]\nDone.", Split(content="Sure.\n\nDone.", calls=(PARIS,))),
    ("content after the list only: leading whitespace stripped", f"{TOK}[{W}]\n\n Done. ",
     Split(content="Done.", calls=(PARIS,))),
    ("a second list", f"{TOK}[{W}] and {TOK}[{T}]", Split(content="and", calls=(PARIS, ("get_time", "{}")))),
    ("an unclosed list keeps its complete elements", f"{TOK}[{W}", Split(calls=(PARIS,))),
    ("cut inside the arguments keeps the prefix", TOK + '[{"name": "get_weather", "arguments": {"city": "Par',
     Split(calls=(("get_weather", '{"city": "Par'),))),
    ("cut before the arguments value: {}", TOK + '[{"name": "get_weather", "arguments": ',
     Split(calls=(("get_weather", "{}"),))),
    ("cut inside the name: no call", TOK + '[{"name": "get_wea', Split()),
    ("a non-object arguments value gives no arguments text", TOK + '[{"name": "f", "arguments": [1, 2]}]',
     Split(calls=(("f", ""),))),
    ("without a call whitespace is content", "  \n", Split(content="  \n")),
    ("a partial marker at the end is content", "Use <|tool_c", Split(content="Use <|tool_c")),
]

G4_VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "The capital of France is Paris.", Split(content="The capital of France is Paris.")),
    ("one call", f"<tool_call>\n{W}\n</tool_call>", Split(calls=(PARIS,))),
    ("two calls, whitespace between dropped", f"<tool_call>{W}</tool_call>\n\n<tool_call>{T}</tool_call>\n",
     Split(calls=(PARIS, ("get_time", "{}")))),
    ("content around and between calls is kept",
     f"Checking.\n<tool_call>{W}</tool_call> and <tool_call>{T}</tool_call>\nDone.",
     Split(content="Checking.\n and \nDone.", calls=(PARIS, ("get_time", "{}")))),
    ("arguments re-serialized like json.dumps",
     '<tool_call>{"name": "s", "arguments": {"x":1.50,"y":[true,null],"z":1e1,"u":"\\u6771"}}</tool_call>',
     Split(calls=(("s", '{"x": 1.5, "y": [true, null], "z": 10.0, "u": "東"}'),))),
    ("broken JSON: all of it is content", 'Checking.<tool_call>{"name": "f", "arguments" {}}</tool_call>',
     Split(content='Checking.<tool_call>{"name": "f", "arguments" {}}</tool_call>')),
    ("no arguments member: all of it is content", '<tool_call>{"name": "get_time"}</tool_call>',
     Split(content='<tool_call>{"name": "get_time"}</tool_call>')),
    ("an unclosed block whose JSON is not complete: content", '<tool_call>{"name": "get_wea',
     Split(content='<tool_call>{"name": "get_wea')),
    ("cut inside the arguments keeps the call (as streamed)", '<tool_call>{"name": "f", "arguments": {"a": "b',
     Split(calls=(("f", '{"a": "b'),))),
    ("a broken block after a call is dropped", f"<tool_call>{W}</tool_call><tool_call>{{oops}}</tool_call> ok",
     Split(content=" ok", calls=(PARIS,))),
    ("a partial marker is content", "Use the <tool_c tag.", Split(content="Use the <tool_c tag.")),
    ("whitespace-only output without calls is content", "\n\n", Split(content="\n\n")),
]


def _ids(vectors: list[tuple[str, str, Split]]) -> list[str]:
    return [v[0] for v in vectors]


@pytest.mark.parametrize(("label", "text", "expected"), G3_VECTORS, ids=_ids(G3_VECTORS))
def test_granite_vectors_one_shot_and_streamed(label: str, text: str, expected: Split) -> None:
    assert one_shot(G3, text) == expected
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(G3, chunks) == expected, chunks


@pytest.mark.parametrize(("label", "text", "expected"), G4_VECTORS, ids=_ids(G4_VECTORS))
def test_granite4_vectors_one_shot_and_streamed(label: str, text: str, expected: Split) -> None:
    assert one_shot(G4, text) == expected
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(G4, chunks) == expected, chunks


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    ctx = ParserContext(tools=AUTO.tools, parallel_tool_calls=False)
    assert one_shot(G3, f"{TOK}[{W}, {T}]", ctx) == Split(calls=(PARIS,))
    assert one_shot(G4, f"<tool_call>{W}</tool_call><tool_call>{T}</tool_call>", ctx) == Split(calls=(PARIS,))


def test_registered_names_and_special_tokens() -> None:
    assert TOOL_PARSERS["granite"] is G3 and TOOL_PARSERS["granite4"] is G4
    # vLLM decodes with special tokens for both (<|tool_call|> is one; some Granite 4s mark <tool_call>)
    assert G3.needs_special_tokens and G4.needs_special_tokens


G3_FRAGMENTS = [TOK, "<tool_call>", "<|tool_", "[", "]", "{", "}", ",", ":", '"', "\\", " ", "\n", '"name"',
                '"arguments"', '"get_weather"', '"x"', "1", "true", "null", "oops", "東京", "😀", "\\u00e9",
                '{"name": "f", "arguments": ', '{"arguments": {"a": 1}, "name": "g"}']
G4_FRAGMENTS = ["<tool_call>", "</tool_call>", "<tool_c", "</tool", "{", "}", "[", "]", ",", ":", '"', "\\", " ",
                "\n", '"name"', '"arguments"', '"f"', "1", "-2.5e3", "true", "null", "x", "東京", "\\ud83d",
                '{"name": "f", "arguments": ', W]


@pytest.mark.parametrize(("cls", "fragments"), [(G3, G3_FRAGMENTS), (G4, G4_FRAGMENTS)], ids=["granite", "granite4"])
@settings(max_examples=250, deadline=None)
@given(data=st.data())
def test_any_split_with_state_round_trips_equals_one_shot(cls: type[G3] | type[G4], fragments: list[str],
                                                          data: st.DataObject) -> None:
    text = "".join(data.draw(st.lists(st.sampled_from(fragments), max_size=40)))
    expected = one_shot(cls, text)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(cls, split_at(text, cuts)) == expected


@pytest.mark.parametrize("cls", [G3, G4], ids=["granite", "granite4"])
def test_state_stays_small_inside_a_long_argument(cls: type[G3] | type[G4]) -> None:
    head = f"{TOK}[" if cls is G3 else "<tool_call>"
    text = head + '{"name": "write", "arguments": {"text": "' + "long text, " * 2000
    parser = cls(AUTO)
    args = []
    for k in range(0, len(text), 7):
        delta = parser.feed(text[k:k + 7])
        args.extend(tc.arguments for tc in delta.tool_calls)
        assert len(json.dumps(parser.snapshot())) < 1024
    assert "".join(args).startswith('{"text": "long text, long text')
