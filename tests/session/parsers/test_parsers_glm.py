"""glm45 / glm47 (GLM-4.5 / 4.6 / 4.7 / 5): ``<think>`` reasoning and
``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`` calls. Vectors are what
vLLM 0.32's non-streaming derender gives for them (its engine grammar ``vllm/parser/glm47_moe.py``,
checked against answers recorded from vLLM: tests/data/vllm/parsers/glm.json), or the documented
difference; checked one-shot, over random splits with the state through JSON, and chained as the
derenderer chains the two parsers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS, TOOL_PARSERS, MalformedSnapshot
from session.parsers.base import ParsedDelta, ParserContext
from session.parsers.reasoning.glm import GlmReasoningParser
from session.parsers.tool.glm import GlmToolParser
from session.parsers.tool.json_stream import escape_lone_surrogates
from session.parsers.tool.schema_values import coerce, types_of

from .parsers_harness import (
    Split,
    check_think_guards,
    fold,
    one_shot,
    random_splits,
    skipping,
    split_at,
    streamed,
)

TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "filters": {"type": "object"}, "limit": {"type": "integer"},
        "exact": {"type": "boolean"}, "score": {"type": "number"}, "tags": {"type": "array"},
        "maybe": {"type": ["string", "null"]}, "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "odd": {"type": "foo"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "free"}},
)
CTX = ParserContext(tools=TOOLS)
OFF = ParserContext(tools=TOOLS, chat_template_kwargs={"enable_thinking": False})
T, R = GlmToolParser, GlmReasoningParser


def c47(name: str, *pairs: tuple[str, str]) -> str:
    """A call as GLM-4.7 writes it."""
    return f"<tool_call>{name}" + "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in pairs) + "</tool_call>"


def c46(name: str, *pairs: tuple[str, str]) -> str:
    """A call as GLM-4.5 / 4.6 write it (a newline after the name and after each tag pair)."""
    return (f"<tool_call>{name}\n" + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs)
            + "</tool_call>")


W = c47("get_weather", ("city", "Paris"))
PARIS = ("get_weather", '{"city": "Paris"}')

# -- the tool parser alone (its input is the reasoning parser's content) -------------------------
TOOL_VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "The capital of France is Paris.", Split(content="The capital of France is Paris.")),
    ("one call (GLM-4.7 layout)", W, Split(calls=(PARIS,))),
    ("one call (GLM-4.6 layout: newlines after the name and the pairs)", c46("get_weather", ("city", "Paris")),
     Split(calls=(PARIS,))),
    ("content before a call: its trailing whitespace is dropped (differs: the leading is sent)", "\n\nLet me check.\n" + W, Split(content="\n\nLet me check.", calls=(PARIS,))),
    ("whitespace-only content before a call is dropped", "\n\n" + W + "\n", Split(calls=(PARIS,))),
    ("text after and between calls is dropped", "Pre. " + W + " between " + W + " after",
     Split(content="Pre.", calls=(PARIS, PARIS))),
    ("three calls, one without arguments", "<tool_call>ping</tool_call>" + W + c47("search", ("query", "x")),
     Split(calls=(("ping", "{}"), PARIS, ("search", '{"query": "x"}')))),
    ("an unknown function is dropped, the text around it stays content",
     "Pre. " + c47("get_stock", ("t", "AAPL")) + " after", Split(content="Pre.  after")),
    ("a function without a schema takes strings", c47("free", ("n", "5"), ("o", "{}")),
     Split(calls=(("free", '{"n": "5", "o": "{}"}'),))),
    ("typed values convert as vLLM's coerce_to_schema_type",
     c47("search", ("query", "42"), ("filters", '{"a": [1, 2.50], "b": {"c": null}}'), ("limit", " 7 "),
         ("exact", "False"), ("score", "3.0"), ("tags", '["x"]'), ("maybe", "null"), ("either", "8"),
         ("odd", "[1]"), ("extra", "9")),
     Split(calls=(("search", '{"query": "42", "filters": {"a": [1, 2.5], "b": {"c": null}}, "limit": 7, '
                             '"exact": false, "score": 3, "tags": ["x"], "maybe": null, "either": 8, "odd": [1], '
                             '"extra": "9"}'),))),
    ("a value that does not convert stays a string",
     c47("search", ("limit", "many"), ("filters", "not json"), ("score", "1e400"), ("either", "x")),
     Split(calls=(("search", '{"limit": "many", "filters": "not json", "score": "1e400", "either": "x"}'),))),
    ("unicode, quotes, backslashes and control characters are JSON-escaped",
     c47("get_weather", ("city", 'Zürich "Alt" \\ 東京 😀\nline\ttab')),
     Split(calls=(("get_weather", '{"city": "Zürich \\"Alt\\" \\\\ 東京 😀\\nline\\ttab"}'),))),
    ("keys are stripped, values are not, text between pairs is ignored",
     "<tool_call> get_weather \n<arg_key> city \n</arg_key> \n <arg_value> Paris </arg_value> junk "
     "<arg_key>days</arg_key><arg_value>2</arg_value> more</tool_call>",
     Split(calls=(("get_weather", '{"city": " Paris ", "days": 2}'),))),
    ("a key runs to the first </arg_key> that <arg_value> follows (vLLM's lazy regex)",
     c47("get_weather", ("city</arg_key>junk<arg_key>b", "v")),
     Split(calls=(("get_weather", '{"city</arg_key>junk<arg_key>b": "v"}'),))),
    ("a value runs to the first </arg_value>",
     c47("get_weather", ("city", "v1<arg_key>b</arg_key><arg_value>v2")),
     Split(calls=(("get_weather", '{"city": "v1<arg_key>b</arg_key><arg_value>v2"}'),))),
    ("an empty key", c47("get_weather", (" ", "1")), Split(calls=(("get_weather", '{"": "1"}'),))),
    ("an unclosed call at the end counts", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>",
     Split(calls=(PARIS,))),
    ("a name longer than every tool name drops its call, pairs and all",
     W + "<tool_call>" + "get_weather_and_more_than_any_tool" + "<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
     Split(calls=(PARIS,))),
    ("whitespace-only content is dropped once a call was read, even a dropped one", "\n<tool_call>nope</tool_call>\n",
     Split()),
    ("a name cut off at the end: a call if it is complete", "Hi <tool_call>ping", Split(content="Hi", calls=(("ping", "{}"),))),
    ("a name cut off at the end: dropped if it is not a tool", "Hi <tool_call>pin", Split(content="Hi ")),
    ("a key without its value is dropped", "<tool_call>get_weather<arg_key>city</tool_call>",
     Split(calls=(("get_weather", "{}"),))),
    ("a held (typed) value cut off is dropped, as vLLM drops the pair",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>1",
     Split(calls=(PARIS,))),
    ("differs: a streamed string value cut off is closed and kept (vLLM: the pair is dropped)",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>San Fran", Split(calls=(("get_weather", '{"city": "San Fran"}'),))),
    ("differs: a value cut off by </tool_call> is closed and kept",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</tool_call>", Split(calls=(PARIS,))),
    ("differs: a repeated key is sent twice (vLLM keeps the last value at the first place)",
     c47("get_weather", ("city", "a"), ("days", "1"), ("city", "b")),
     Split(calls=(("get_weather", '{"city": "a", "days": 1, "city": "b"}'),))),
    ("stray tags outside a call are content", "a <arg_key>k</arg_key> </tool_call> b",
     Split(content="a <arg_key>k</arg_key> </tool_call> b")),
    ("a partial marker at the end is content", "Use the <tool_c", Split(content="Use the <tool_c")),
    ("trailing whitespace without a call stays", "Hi.\n\n", Split(content="Hi.\n\n")),
    ("a long typed value streams as JSON past the hold", c47("search", ("filters", '{"k": [' + ", ".join(["1"] * 200) + "]}")),
     Split(calls=(("search", '{"filters": {"k": [' + ", ".join(["1"] * 200) + "]}}"),))),
    ("a long value the schema may convert streams as a string past the hold", c47("search", ("either", "word " * 80)),
     Split(calls=(("search", json.dumps({"either": "word " * 80})),))),
]


@pytest.mark.parametrize(("label", "text", "expected"), TOOL_VECTORS, ids=[v[0] for v in TOOL_VECTORS])
def test_tool_vector_one_shot_and_over_splits(label: str, text: str, expected: Split) -> None:
    assert one_shot(T, text, CTX) == expected
    for k, chunks in enumerate(random_splits(text, seed=len(label))):
        assert streamed(T, chunks, CTX) == expected, (k, chunks)


# -- the reasoning parser alone ----------------------------------------------------------------
REASONING_VECTORS: list[tuple[str, str, ParserContext, Split]] = [
    ("GLM-4.7: the prompt opened <think>", "The user greets me.</think>Hello!", CTX,
     Split(reasoning="The user greets me.", content="Hello!")),
    ("GLM-4.6: the model writes \\n<think>; the leading newline stays reasoning",
     "\n<think>Let me think.\n</think>\nThe answer.", CTX, Split(reasoning="\nLet me think.", content="\nThe answer.")),
    ("no </think>: all reasoning (cut short), trailing whitespace stripped", "still thinking \n", CTX,
     Split(reasoning="still thinking")),
    ("a call ends reasoning; the marker is content", "so I call " + W, CTX, Split(reasoning="so I call", content=W)),
    ("</think> in content is dropped, <think> reopens reasoning", "a \n</think>c1 </think><think> b \n</think> c2", CTX,
     Split(reasoning="a \n b", content="c1  c2")),
    ("thinking off: everything is content, tags too", "<think>x</think>Hello", OFF, Split(content="<think>x</think>Hello")),
    ("thinking off by the `thinking` kwarg", "r</think>ok", ParserContext(chat_template_kwargs={"thinking": False}),
     Split(content="r</think>ok")),
    ("either kwarg truthy: on", "r</think>ok",
     ParserContext(chat_template_kwargs={"thinking": False, "enable_thinking": True}), Split(reasoning="r", content="ok")),
    ("only </think>", "</think>", CTX, Split()),
    ("a partial tag at the end is reasoning", "hmm </thi", CTX, Split(reasoning="hmm </thi")),
]


@pytest.mark.parametrize(("label", "text", "ctx", "expected"), REASONING_VECTORS, ids=[v[0] for v in REASONING_VECTORS])
def test_reasoning_vector_one_shot_and_over_splits(label: str, text: str, ctx: ParserContext, expected: Split) -> None:
    assert one_shot(R, text, ctx) == expected
    for chunks in random_splits(text, seed=len(label)):
        assert streamed(R, chunks, ctx) == expected


# -- chained as the derenderer runs them ---------------------------------------------------------
def chained(chunks: list[str], ctx: ParserContext = CTX) -> Split:
    reasoning, tool = R(ctx), T(ctx)
    deltas: list[ParsedDelta] = []
    for chunk in [*chunks, None]:
        r = reasoning.feed(chunk) if chunk is not None else reasoning.finish()
        t = tool.feed(r.content) if r.content else ParsedDelta()
        if chunk is None:
            t.extend(tool.finish())
        t.reasoning = r.reasoning
        deltas.append(t)
        if chunk is not None:
            reasoning = R.restore(ctx, json.loads(json.dumps(reasoning.snapshot())))
            tool = T.restore(ctx, json.loads(json.dumps(tool.snapshot())))
    return fold(deltas)


CHAIN_VECTORS: list[tuple[str, str, ParserContext, Split]] = [
    ("GLM-4.6 reasoning, content, a call (differs: the leading newline is sent)",
     "\n<think>plan</think>\nLet me check.\n" + c46("get_weather", ("city", "Paris"), ("days", "3")), CTX,
     Split(reasoning="\nplan", content="\nLet me check.", calls=(("get_weather", '{"city": "Paris", "days": 3}'),))),
    ("GLM-4.7 call straight after the reasoning", "Need weather.</think>" + W, CTX,
     Split(reasoning="Need weather.", calls=(PARIS,))),
    ("a call inside the reasoning ends it", "I call the tool " + W, CTX, Split(reasoning="I call the tool", calls=(PARIS,))),
    ("thinking off, a call", "<think>x</think>Hello " + W, OFF, Split(content="<think>x</think>Hello", calls=(PARIS,))),
    ("think tags in content are the reasoning parser's (even inside a value, as vLLM's reasoning pass)",
     "r</think>" + c47("get_weather", ("city", "a</think>b<think>c")), CTX,
     Split(reasoning="rc</arg_value></tool_call>", calls=(("get_weather", '{"city": "ab"}'),))),
]


@pytest.mark.parametrize(("label", "text", "ctx", "expected"), CHAIN_VECTORS, ids=[v[0] for v in CHAIN_VECTORS])
def test_chained_vector_over_splits(label: str, text: str, ctx: ParserContext, expected: Split) -> None:
    for chunks in random_splits(text, seed=len(label)):
        assert chained(chunks, ctx) == expected


# -- properties over GLM fragments ------------------------------------------------------------
FRAGMENTS = ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<think>",
             "</think>", "<tool_c", "</arg_", "<arg_v", "get_weather", "search", "ping", "free", "nope", "city", "days",
             "limit", "filters", "either", "maybe", "Paris", "3", " 7 ", "-0.5", "true", "null", '{"a": [1, 2]}', "[1",
             "{", "}", '"', "\\", " ", "\n", "\t", "\u3000", "\x1c", "x", "東京", "😀", "<", ">"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
CONTEXTS = [CTX, OFF, ParserContext(tools=TOOLS, parallel_tool_calls=False), ParserContext(tools=TOOLS, tool_choice="none"),
            ParserContext(tool_choice="none")]


@settings(max_examples=300, deadline=None)
@given(text=texts, data=st.data(), ctx=st.sampled_from(CONTEXTS), cls=st.sampled_from([T, R]))
def test_any_split_with_state_round_trips_equals_one_shot(text: str, data: st.DataObject, ctx: ParserContext,
                                                          cls: type[GlmToolParser] | type[GlmReasoningParser]) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(cls, split_at(text, cuts), ctx) == one_shot(cls, text, ctx)


@settings(max_examples=300, deadline=None)
@given(text=texts, data=st.data(), ctx=st.sampled_from(CONTEXTS))
def test_chained_any_split_equals_one_shot(text: str, data: st.DataObject, ctx: ParserContext) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert chained(split_at(text, cuts), ctx) == chained([text], ctx)


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from(["city", "days", "unit", " x ", ""]),
                                st.text(alphabet=st.characters(blacklist_characters="<"), max_size=12)), max_size=5))
def test_well_formed_calls_give_vllms_arguments(pairs: list[tuple[str, str]]) -> None:
    """vLLM's converter on a well-formed call: json.dumps of {stripped key: value} (last value of a
    repeated key), each value converted by the schema; here without repeated keys. (A lone surrogate
    stays escaped: docs/parsers.md, "Arguments: canonical streaming".)"""
    seen: set[str] = set()
    pairs = [(k, v) for k, v in pairs if not (k.strip() in seen or seen.add(k.strip()))]  # type: ignore[func-returns-value]
    props = TOOLS[0]["function"]["parameters"]["properties"]
    want = escape_lone_surrogates(json.dumps({k.strip(): coerce(v, types_of(props[k.strip()]))
                                              if k.strip() in props else v for k, v in pairs}, ensure_ascii=False))
    for text in (c47("get_weather", *pairs), c46("get_weather", *pairs)):
        assert one_shot(T, text, CTX) == Split(calls=(("get_weather", want),))


# -- the rest of the contract -------------------------------------------------------------------
def test_both_names_are_one_grammar_and_keep_special_tokens() -> None:
    assert TOOL_PARSERS["glm45"] is TOOL_PARSERS["glm47"] is T
    assert REASONING_PARSERS["glm45"] is REASONING_PARSERS["glm47"] is R
    assert T.needs_special_tokens and R.needs_special_tokens  # the tags are special tokens in GLM's tokenizer
    assert T.supports_required_and_named is False and T.engine_based and R.engine_based


def test_tool_choice_none_drops_the_calls_as_vllm_does() -> None:
    text = "Hi " + W + " end"
    # with tools: the calls are taken out, the text around them is content as it is
    assert one_shot(T, text, ParserContext(tools=TOOLS, tool_choice="none")) == Split(content="Hi  end")
    # without tools: read as calls (any name), so the content stops at the first, but none is reported
    parser = T(ParserContext(tool_choice="none"))
    assert fold([parser.feed(text), parser.finish()]) == Split(content="Hi")
    assert parser.calls_made == 0


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    ctx = ParserContext(tools=TOOLS, parallel_tool_calls=False)
    parser = T(ctx)
    assert fold([parser.feed(W + c47("ping")), parser.finish()]) == Split(calls=(PARIS,))
    assert parser.calls_made == 2


def test_a_string_value_streams_as_it_is_generated() -> None:
    parser = T(CTX)
    first = parser.feed("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par")
    assert [(d.name, d.arguments) for d in first.tool_calls] == [("get_weather", ""), (None, '{"city": "Par')]
    assert [d.arguments for d in parser.feed("is, Fra").tool_calls] == ["is, Fra"]
    assert [d.arguments for d in parser.feed("nce</arg_value></tool_call>").tool_calls] == ['nce"}']


def test_a_typed_value_is_held_until_it_closes() -> None:
    parser = T(CTX)
    parser.feed("<tool_call>get_weather<arg_key>days</arg_key><arg_value>1")
    assert not parser.feed("2").tool_calls
    assert [d.arguments for d in parser.feed("</arg_value>").tool_calls] == ['"days": 12']


def test_the_reasoning_and_content_guards_are_offered_with_nothing_held() -> None:
    check_think_guards(R(CTX))


JSON_PIECES = [" is", " a < b", " 東京 😀", ' \\"q\\"', " ", "\\n", " x <", " y", " z </arg", "_v", " end "]  # (in a JSON string)
PLAIN_PIECES = [" is", " a < b", " city", "\n", " of", " 東京 😀", ' "q"', " ", "\\n", " x <", " y", " z </arg", "_v", " end "]


@pytest.mark.parametrize("layout", [c47, c46], ids=["glm47", "glm45"])
@pytest.mark.parametrize("ctx", [CTX, ParserContext(tools=TOOLS, parallel_tool_calls=False),
                                 ParserContext(tools=TOOLS, tool_choice="none"), ParserContext(tool_choice="none")],
                         ids=["auto", "serial", "none", "no_tools"])
def test_the_args_shortcut_inside_a_string_value_splits_as_feeding(layout: Any, ctx: ParserContext) -> None:
    # a string value (city), a typed value held then streamed as JSON past VALUE_HOLD (filters), and
    # a second call (not reported with parallel_tool_calls false)
    one = layout("get_weather", ("city", "\0"), ("days", "\1"))  # (days: held until it closes)
    two = layout("search", ("filters", '{"note": "' + "long " * 60 + "\0"))
    cut1, held, cut2 = one.index("\0"), one.index("\1"), two.index("\0")
    chunks = ["plan</think>", "Let me", " check.", one[:cut1], "Pa", "ris", *PLAIN_PIECES, one[cut1 + 1:held],
              "1", "2", one[held + 1:], two[:cut2], *JSON_PIECES, '", "n": ', "1", "2", " ", "}", two[cut2 + 1:],
              layout("get_weather", ("city", "\0")).split("\0")[0], "Ro", "me", *PLAIN_PIECES, "</tool_call>"]
    reasoning, tool = R(ctx), T(ctx)
    offered = []
    for chunk in chunks:
        tool.feed(reasoning.feed(chunk).content)
        if chunk in ("ris", two[:cut2], "me"):  # in the first call's string, the second's JSON string, the third's
            offered.append(tool.plain_args_call())
            assert reasoning.plain_content_guard() == tool.plain_args_guard() == "<"
    reported = ctx.tool_choice != "none"
    assert offered == (([0, 1, 2] if ctx.parallel_tool_calls else [0, None, None]) if reported else [None] * 3)
    skipped: list[str] = []
    assert skipping(T(ctx), chunks, R(ctx), skipped) == chained(["".join(chunks)], ctx)
    assert bool(skipped) == reported


@pytest.mark.parametrize("text", [
    "r" * 20000 + "</think>done",
    "r</think><tool_call>search<arg_key>query</arg_key><arg_value>" + "long argument é 東京 " * 1200 + "</arg_value></tool_call>",
    "r</think><tool_call>search<arg_key>filters</arg_key><arg_value>{\"k\": [" + "1, " * 7000 + "1]}</arg_value>",
    "r</think>content " * 2000 + " " * 5000 + W,
    "thinking" + " \n" * 5000 + "</think>",
    "r</think><tool_call>" + "n" * 20000,
    "r</think>" + c47("search", ("k" * 20000, "v")),
    "r</think><tool_call>get_weather<arg_key>a</arg_key>" + " " * 20000 + "<arg_value>v</arg_value></tool_call>",
    "r</think><tool_call>search<arg_key>either</arg_key><arg_value>" + "x" * 20000,
], ids=["reasoning", "string argument", "typed JSON argument", "content", "reasoning whitespace", "name", "key", "gap",
        "held value"])
def test_the_state_stays_small_on_long_outputs(text: str) -> None:
    reasoning, tool = R(CTX), T(CTX)
    biggest = 0
    for k in range(0, len(text), 97):
        r = reasoning.feed(text[k : k + 97])
        tool.feed(r.content)
        biggest = max(biggest, len(json.dumps(reasoning.snapshot())), len(json.dumps(tool.snapshot())))
    assert biggest < 1024


@pytest.mark.parametrize("snapshot", [
    None, {}, {"p": "hermes"}, {"p": "glm45", "m": "text"}, {"p": "glm45", "m": "bogus", "b": "", "n": 0, "w": "",
    "a": False, "f": "", "k": "", "g": "", "t": "", "v": "", "j": None, "1": True},
    {"p": "glm45", "m": "val", "b": "", "n": 0, "w": "", "a": False, "f": "", "k": "", "g": "", "t": "z", "v": "",
     "j": None, "1": True},
])
def test_tool_restore_refuses_a_bad_snapshot(snapshot: Any) -> None:
    with pytest.raises(MalformedSnapshot):
        T.restore(CTX, snapshot)


@pytest.mark.parametrize("snapshot", [None, {}, {"p": "qwen3"}, {"p": "glm45", "m": "q", "b": "", "w": ""},
                                      {"p": "glm45", "m": "r", "b": "", "w": "xx"}, {"p": "glm45", "m": "r", "b": 3, "w": ""}])
def test_reasoning_restore_refuses_a_bad_snapshot(snapshot: Any) -> None:
    with pytest.raises(MalformedSnapshot):
        R.restore(CTX, snapshot)


@pytest.mark.parametrize(("value", "types", "want"), [
    ("5", {"integer"}, 5), (" 5 ", {"integer"}, 5), ("1_000", {"integer"}, 1000), ("abc", {"integer"}, "abc"),
    ('"q"', {"integer"}, "q"), ("[1, 2]", {"integer"}, [1, 2]), ("3.0", {"number"}, 3), ("-0.5", {"number"}, -0.5),
    ("1e400", {"number"}, "1e400"), ("1", {"boolean"}, True), ("False ", {"boolean"}, False), ("NULL", {"null", "string"}, None),
    ("x", {"null", "string"}, "x"), ("12", {"integer", "string"}, 12), ("{bad", {"object"}, "{bad"),
    ('{"k": 1e5}', {"object"}, {"k": 100000.0}), ("7", {"int"}, 7), ("[1]", {"foo"}, [1]), ("abc", {"foo"}, "abc"),
    ("[1e999]", {"array"}, "[1e999]"),
])
def test_coerce_reads_values_as_vllm(value: str, types: set[str], want: Any) -> None:
    got = coerce(value, types_of({"type": sorted(types)}))
    assert got == want and type(got) is type(want)


def test_schema_types_as_vllm() -> None:
    assert types_of({"enum": ["a", 1, 1.5, None, True, [], {}]}) == {"string", "integer", "number", "null", "boolean",
                                                                         "array", "object"}
    assert types_of({"anyOf": [{"type": "integer"}, {"oneOf": [{"type": ["string", "null"]}]}]}) == {
        "integer", "string", "null"}
    assert types_of({}) == {"string"} and types_of(None) is None
