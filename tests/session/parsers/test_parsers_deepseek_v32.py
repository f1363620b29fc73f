"""deepseek_v32 (DeepSeek-V3.2's DSML calls) and the deepseek_v3 / holo2 reasoning parsers: vectors
with the split vLLM 0.32's DeepSeek-V3.2 engine grammar gives (checked against vLLM's own parser
when they were written; where a stream cannot match it, the documented behaviour), one-shot and
over random splits, a property test over DSML fragments, and the snapshot's size on long outputs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS, TOOL_PARSERS
from session.parsers.base import ParserContext
from session.parsers.errors import MalformedSnapshot
from session.parsers.reasoning.deepseek_v3 import DeepSeekV3ReasoningParser, Holo2ReasoningParser
from session.parsers.tool.deepseek_v32 import HOLD, DeepSeekV32ToolParser
from session.parsers.tool.schema_values import always_string, coerce, fit, types_of

from .parsers_harness import Split, one_shot, random_splits, skipping, split_at, streamed

P = DeepSeekV32ToolParser
D = "｜DSML｜"
TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "filters": {"type": "object"}, "tags": {"type": "array", "items": {"type": "string"}},
        "limit": {"type": "integer"}, "exact": {"type": "boolean"}, "score": {"type": "number"},
        "cursor": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
)
CTX = ParserContext(tools=TOOLS)


def param(key: str, value: str, string: str | None = "true", close: bool = True) -> str:
    attr = "" if string is None else f' string="{string}"'
    return f'<{D}parameter name="{key}"{attr}>{value}' + (f"</{D}parameter>\n" if close else "")


def invoke(name: str, *params: str, end: bool = True) -> str:
    return f'<{D}invoke name="{name}">\n' + "".join(params) + (f"</{D}invoke>\n" if end else "")


def block(*invokes: str) -> str:
    return f"\n\n<{D}function_calls>\n" + "".join(invokes) + f"</{D}function_calls>"


PARIS = invoke("get_weather", param("city", "Paris"), param("days", "3", "false"))
PARIS_ARGS = '{"city": "Paris", "days": 3}'

VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "The capital of France is Paris.", Split(content="The capital of France is Paris.")),
    ("one call: leading whitespace content is dropped", block(PARIS), Split(calls=(("get_weather", PARIS_ARGS),))),
    ("content before the call stays as it is", "Let me check." + block(PARIS),
     Split(content="Let me check.\n\n", calls=(("get_weather", PARIS_ARGS),))),
    ("an invoke needs no wrapper", "Sure. " + PARIS, Split(content="Sure. ", calls=(("get_weather", PARIS_ARGS),))),
    ("two calls and one without parameters",
     block(PARIS, invoke("get_time"), invoke("search", param("query", "rain"))),
     Split(calls=(("get_weather", PARIS_ARGS), ("get_time", "{}"), ("search", '{"query": "rain"}')))),
    ("typed values: JSON for string=false, then fitted to the schema",
     block(invoke("search", param("query", "x"), param("filters", '{"a": [1, 2.50]}', "false"),
                  param("tags", '["a", "b"]', "false"), param("limit", "10", "true"), param("exact", "true", "false"),
                  param("score", "1e3", "false"), param("cursor", "null", "false"))),
     Split(calls=(("search", '{"query": "x", "filters": {"a": [1, 2.5]}, "tags": ["a", "b"], "limit": 10, '
                             '"exact": true, "score": 1000, "cursor": null}'),))),
    ("a number for a string property becomes its text; an integer string becomes the integer",
     block(invoke("get_weather", param("city", "123", "false"), param("days", "7"))),
     Split(calls=(("get_weather", '{"city": "123", "days": 7}'),))),
    ("string=false text that is not JSON stays text",
     block(invoke("search", param("query", "hello world", "false"), param("limit", "many", "false"))),
     Split(calls=(("search", '{"query": "hello world", "limit": "many"}'),))),
    ("a missing string attribute reads as JSON", block(invoke("get_weather", param("days", "4", None))),
     Split(calls=(("get_weather", '{"days": 4}'),))),
    ("unicode, quotes, backslashes and newlines in a string value",
     block(invoke("write_file", param("path", "東京/😀.txt"), param("content", 'say "hi"\\n\tend\nline 2'))),
     Split(calls=(("write_file", '{"path": "東京/😀.txt", "content": "say \\"hi\\"\\\\n\\tend\\nline 2"}'),))),
    ("an unknown function is still a call, its values not fitted",
     block(invoke("not_a_tool", param("q", "1"), param("n", "1", "false"))),
     Split(calls=(("not_a_tool", '{"q": "1", "n": 1}'),))),
    ("a value ends at the next parameter when its end tag is missing",
     block(invoke("get_weather", param("city", "Paris", close=False), param("days", "2", "false"))),
     Split(calls=(("get_weather", '{"city": "Paris", "days": 2}'),))),
    ("text between parameters is ignored",
     block(invoke("get_weather", "noise ", param("city", "Rome"), "more noise\n")),
     Split(calls=(("get_weather", '{"city": "Rome"}'),))),
    ("a malformed parameter tag is not a parameter",
     block(invoke("get_weather", f'<{D}parameter nam="city">x</{D}parameter>', param("city", "Oslo"))),
     Split(calls=(("get_weather", '{"city": "Oslo"}'),))),
    ("text after the calls is dropped", block(PARIS) + "\nDone!", Split(calls=(("get_weather", PARIS_ARGS),))),
    ("an empty function name drops the call", block(invoke(""), PARIS), Split(calls=(("get_weather", PARIS_ARGS),))),
    ("a name is stripped", block(invoke(" get_weather\n", param("city", "Paris"))),
     Split(calls=(("get_weather", '{"city": "Paris"}'),))),
    ("an unclosed invoke at the end counts", "<" + f"{D}function_calls>\n" + invoke("get_weather", param("city", "Nice"), end=False),
     Split(calls=(("get_weather", '{"city": "Nice"}'),))),
    ("output cut inside the name: a call without arguments (as vLLM)", f'<{D}invoke name="get_wea',
     Split(calls=(("get_wea", "{}"),))),
    ("output cut inside a string value: the value so far, closed (vLLM drops the parameter)",
     block(invoke("write_file", param("path", "a.txt"), param("content", "hel", close=False), end=False))[:-len(f"</{D}function_calls>")],
     Split(calls=(("write_file", '{"path": "a.txt", "content": "hel"}'),))),
    ("a wrapper parameter is unwrapped when its keys are the function's",
     block(invoke("get_weather", param("arguments", '{"city": "Lima", "days": "2"}', "false"))),
     Split(calls=(("get_weather", '{"city": "Lima", "days": 2}'),))),
    ("a wrapper with other keys stays", block(invoke("get_weather", param("arguments", '{"town": "Lima"}', "false"))),
     Split(calls=(("get_weather", '{"arguments": {"town": "Lima"}}'),))),
    ("a wrapper beside another parameter stays",
     block(invoke("get_weather", param("input", '{"city": "Lima"}'), param("days", "1", "false"))),
     Split(calls=(("get_weather", '{"input": "{\\"city\\": \\"Lima\\"}", "days": 1}'),))),
    ("markup-like text in content is content", 'a">b </｜DSML｜invoke> <｜DSML｜parameter',
     Split(content='a">b </｜DSML｜invoke> <｜DSML｜parameter')),
    ("a partial marker at the end is content", "Use <｜DSML｜invo", Split(content="Use <｜DSML｜invo")),
    ("whitespace-only content without a call is kept", "\n\n", Split(content="\n\n")),
    ("a wrapper with no invoke keeps the content", "\n\n<｜DSML｜function_calls>\n</｜DSML｜function_calls>",
     Split(content="\n\n")),
]
IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("name", "text", "want"), VECTORS, ids=IDS)
def test_vectors_one_shot(name: str, text: str, want: Split) -> None:
    assert one_shot(P, text, CTX) == want


@pytest.mark.parametrize(("name", "text", "want"), VECTORS, ids=IDS)
def test_vectors_over_random_splits(name: str, text: str, want: Split) -> None:
    for chunks in random_splits(text, seed=hash(name) % 1000):
        assert streamed(P, chunks, CTX) == want, chunks


def test_registered_under_vllms_names() -> None:
    assert TOOL_PARSERS["deepseek_v32"] is P
    assert REASONING_PARSERS["deepseek_v3"] is DeepSeekV3ReasoningParser
    assert REASONING_PARSERS["holo2"] is Holo2ReasoningParser
    assert not P.needs_special_tokens  # the DSML markers are text; vLLM drops special tokens anyway


def test_a_string_value_streams_as_it_is_generated() -> None:
    parser = P(CTX)
    first = parser.feed(f'\n\n<{D}function_calls>\n<{D}invoke name="write_file">\n<{D}parameter name="content" string="true">')
    assert [(d.name, d.arguments) for d in first.tool_calls] == [("write_file", ""), (None, '{"content": "')]
    for word in ("Once ", "upon ", "a ", "time"):
        delta = parser.feed(word)
        assert [d.arguments for d in delta.tool_calls] == [word]
    end = parser.feed(f"</{D}parameter>\n</{D}invoke>")
    assert "".join(d.arguments for d in end.tool_calls) == '"}'


def test_a_key_streams_when_its_tag_is_read_and_a_short_number_when_it_ends() -> None:
    parser = P(CTX)
    parser.feed(f'<{D}invoke name="get_weather">\n<{D}parameter name="days" string="false">1')
    assert parser.feed("2").tool_calls == []
    assert "".join(d.arguments for d in parser.feed(f"</{D}parameter>").tool_calls) == "12"


def test_a_long_json_value_streams_before_it_ends() -> None:
    parser = P(CTX)
    first = parser.feed(f'<{D}invoke name="search">\n<{D}parameter name="tags" string="false">[')
    sent = "".join(d.arguments for d in first.tool_calls)
    for k in range(200):
        sent += "".join(d.arguments for d in parser.feed(f'"t{k}", ').tool_calls)
    assert len(sent) > 1000 and sent.startswith('{"tags": ["t0", "t1"')


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    ctx = ParserContext(tools=TOOLS, parallel_tool_calls=False)
    got = one_shot(P, block(PARIS, invoke("get_time")), ctx)
    assert got.calls == (("get_weather", PARIS_ARGS),)
    parser = P(ctx)
    parser.feed(block(PARIS, invoke("get_time")))
    assert parser.calls_made == 2


def test_without_tools_values_are_not_fitted() -> None:
    got = one_shot(P, block(invoke("get_weather", param("days", "3"), param("city", "5", "false"))), ParserContext())
    assert got.calls == (("get_weather", '{"days": "3", "city": 5}'),)


def test_snapshot_stays_small_on_long_outputs() -> None:
    text = block(invoke("write_file", param("path", "big.txt"), param("content", "lorem ipsum " * 2000)),
                 invoke("search", param("tags", json.dumps([f"tag{k}" for k in range(2000)]), "false")))
    parser = P(CTX)
    for chunks in (split_at(text, range(0, len(text), 7)),):
        for chunk in chunks:
            parser.feed(chunk)
            assert len(json.dumps(parser.snapshot())) < 1024
    assert HOLD < 400


def test_restore_refuses_a_bad_snapshot() -> None:
    with pytest.raises(MalformedSnapshot):
        P.restore(CTX, {"p": "hermes"})
    good = P(CTX).snapshot()
    with pytest.raises(MalformedSnapshot):
        P.restore(CTX, {**good, "s": "zz"})
    with pytest.raises(MalformedSnapshot):
        P.restore(CTX, {k: v for k, v in good.items() if k != "x"})


FRAGMENTS = [
    f"<{D}function_calls>", f"</{D}function_calls>", f'<{D}invoke name="', '">', f"</{D}invoke>",
    f"<{D}parameter", f"</{D}parameter>", ' name="', 'city"', 'days"', 'arguments"', ' string="true"',
    ' string="false"', ">", "<", "</", D, "get_weather", "search", "Paris", "3", "-1.5e2", "true", "null", "[1,",
    '{"a": ', '"x"', "}", "]", "\\", '"', "\n", " ", "東京", "😀", "\t", "name=", f"<{D}",
]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=texts, data=st.data())
def test_streamed_equals_one_shot_for_any_dsml_text_and_split(text: str, data: st.DataObject) -> None:
    expected = one_shot(P, text, CTX)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(P, split_at(text, cuts), CTX) == expected


def test_long_values_are_decided_at_the_hold_bound_the_same_way_at_any_split() -> None:
    long_json = json.dumps({"k": ["v" * 10] * 40})
    text = block(invoke("search", param("filters", long_json, "false"), param("query", "x" * (HOLD + 5), "false")))
    want = one_shot(P, text, CTX)
    assert want.calls == (("search", json.dumps({"filters": json.loads(long_json), "query": "x" * (HOLD + 5)})),)
    for chunks in random_splits(text, seed=3):
        assert streamed(P, chunks, CTX) == want


# -- the derenderer's argument shortcut (plain_args_call) ------------------------------------------

SERIAL = ParserContext(tools=TOOLS, parallel_tool_calls=False)


@pytest.mark.parametrize("ctx", [CTX, SERIAL, ParserContext()], ids=["auto", "serial", "no_tools"])
def test_the_args_shortcut_inside_a_string_value_splits_as_feeding(ctx: ParserContext) -> None:
    head = [f"<{D}function_calls>\n", f'<{D}invoke name="write_file">\n', f'<{D}parameter name="content" string="true">',
            "Once"]
    string = [" upon", " a < b", " time", ' "q"', "\n", " 東京 😀", "\\", f"</{D}parameter>\n", f"</{D}invoke>\n"]
    # a string inside a JSON value long enough to stream (past HOLD), in a second call
    json_head = [f'<{D}invoke name="search">\n', f'<{D}parameter name="filters" string="false">', '{"note": "',
                 "x" * (HOLD + 1)]
    json_rest = [" and", " y", ' "z"', " <", "b", '"}', f"</{D}parameter>", f"</{D}invoke>", f"</{D}function_calls>"]
    parser = P(ctx)
    for chunk in head:
        parser.feed(chunk)
    assert parser.plain_args_call() == 0
    assert parser.plain_args_guard() == "<"
    for chunk in string + json_head:
        parser.feed(chunk)
    assert parser.plain_args_call() == (None if ctx is SERIAL else 1)  # only a call that is reported
    chunks = head + string + json_head + json_rest
    want = one_shot(P, "".join(chunks), ctx)
    assert len(want.calls) == (1 if ctx is SERIAL else 2)
    assert skipping(P(ctx), chunks) == want


# heads that leave the parser in each kind of value: a string="true" string, a held typed value, a
# JSON value inside its string, nothing open
SHORTCUT_HEADS = ["", f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">Par',
                  f'<{D}invoke name="search">\n<{D}parameter name="limit" string="false">1',
                  f'<{D}invoke name="search">\n<{D}parameter name="tags" string="false">["' + "t" * HOLD]


@settings(max_examples=300, deadline=None)
@given(head=st.sampled_from(SHORTCUT_HEADS), text=st.lists(st.sampled_from([*FRAGMENTS, "plain words", "a"]),
                                                           max_size=30).map("".join), data=st.data())
def test_skipping_what_the_args_shortcut_covers_splits_as_feeding(head: str, text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    chunks = [head, *split_at(text, cuts)]
    for ctx in (CTX, SERIAL):
        assert skipping(P(ctx), chunks) == one_shot(P, head + text, ctx)


# -- schema fitting, as vLLM's coerce_to_schema_type / _coerce_value ---------------------------


@pytest.mark.parametrize(("value", "types", "want"), [
    ("5", ["integer"], 5), ("5", ["string", "integer"], 5), ("abc", ["integer"], "abc"), ("5.5", ["integer"], 5.5),
    ("2.0", ["number"], 2), ("2.5", ["float"], 2.5), ("inf", ["number"], "inf"), ("True", ["boolean"], True),
    ("0", ["bool"], False), ("null", ["null", "string"], None), ("null", ["string"], "null"),
    ('{"a": 1}', ["object"], {"a": 1}), ("[1e999]", ["array"], "[1e999]"), ("[1]", ["foo"], [1]),
])
def test_coerce_string(value: str, types: list[str], want: Any) -> None:
    got = coerce(value, types_of({"type": types}))
    assert got == want and type(got) is type(want)


def test_coerce_value_and_schema_types() -> None:
    assert fit(5, {"type": "string"}) == "5"
    assert fit(None, {"type": "string"}) == "null"
    assert fit(1, {"type": "boolean"}) is True
    assert fit({"n": "5", "s": 1}, {"type": "object", "properties": {"n": {"type": "integer"}}}) == {"n": 5, "s": 1}
    assert fit(["1", "x"], {"type": "array", "items": {"type": "integer"}}) == [1, "x"]
    assert types_of({"anyOf": [{"type": "string"}, {"enum": [1, None]}]}) == {"string", "integer", "null"}
    assert always_string(types_of({"type": "string", "enum": ["a"]})) and always_string(types_of(None))
    assert not always_string(types_of({"type": ["string", "null"]})) and not always_string(types_of({"type": "foo"}))


# -- reasoning ---------------------------------------------------------------------------------


def _think(kwargs: dict[str, Any], cls: type = DeepSeekV3ReasoningParser) -> Split:
    return one_shot(cls, "Let me think.</think>The answer is 4.", ParserContext(chat_template_kwargs=kwargs))


@pytest.mark.parametrize(("kwargs", "thinking"), [
    ({}, False), ({"thinking": True}, True), ({"enable_thinking": True}, True), ({"thinking": False}, False),
    ({"thinking": None}, False), ({"thinking": "auto"}, False), ({"thinking": "no"}, True),
    ({"thinking": False, "enable_thinking": True}, True),
])
def test_deepseek_v3_splits_only_when_thinking(kwargs: dict[str, Any], thinking: bool) -> None:
    if thinking:
        assert _think(kwargs) == Split(reasoning="Let me think.", content="The answer is 4.")
    else:
        assert _think(kwargs) == Split(content="Let me think.</think>The answer is 4.")


@pytest.mark.parametrize(("kwargs", "thinking"), [
    ({}, True), ({"thinking": None}, True), ({"thinking": False}, False), ({"enable_thinking": False}, False),
    ({"enable_thinking": True}, True),
])
def test_holo2_thinks_by_default(kwargs: dict[str, Any], thinking: bool) -> None:
    want = Split(reasoning="Let me think.", content="The answer is 4.") if thinking else Split(
        content="Let me think.</think>The answer is 4.")
    assert _think(kwargs, Holo2ReasoningParser) == want


def test_deepseek_v3_thinking_unclosed_is_reasoning_and_streams_like_one_shot() -> None:
    ctx = ParserContext(chat_template_kwargs={"thinking": True})
    text = "Step one. <thi" + "nk>Step two.</thi" + "nk>\n\nDone" + block(PARIS)
    want = one_shot(DeepSeekV3ReasoningParser, text, ctx)
    assert want.reasoning == "Step one. Step two." and want.content.startswith("\n\nDone")
    for chunks in random_splits(text, seed=5):
        assert streamed(DeepSeekV3ReasoningParser, chunks, ctx) == want
    assert one_shot(DeepSeekV3ReasoningParser, "cut short", ctx) == Split(reasoning="cut short")
