"""kimi_k2 (Kimi-K2 Instruct / Thinking / K2.5): the tool parser (``<|tool_calls_section_begin|>`` …
``functions.NAME:IDX`` headers) and the reasoning parser (``<think>`` … ``</think>``, a tool-call section
ending reasoning, thinking off). The vectors are what vLLM 0.32's kimi_k2 grammar gives non-streaming
(read from vllm/parser/kimi_k2.py and its engine, and checked against tests/data/vllm/parsers/kimi_k2.json),
one-shot and over random splits with the snapshots through JSON between feeds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS, TOOL_PARSERS
from session.parsers.base import ParsedDelta, ParserContext
from session.parsers.reasoning.kimi_k2 import KimiK2ReasoningParser
from session.parsers.reasoning.shared import thinking_enabled
from session.parsers.tool.kimi_k2 import HEAD_MAX, KimiK2ToolParser, call_id_and_name

from .parsers_harness import (
    TOOLS,
    Split,
    check_think_guards,
    fold,
    one_shot,
    random_splits,
    skipping,
    split_at,
    streamed,
)

T = KimiK2ToolParser
R = KimiK2ReasoningParser
SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CB, AB, CE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
AUTO = ParserContext(tools=TOOLS)
NONE = ParserContext(tools=TOOLS, tool_choice="none")
OFF = ParserContext(tools=TOOLS, chat_template_kwargs={"thinking": False})


def call(name: str, idx: int, args: str) -> str:
    return f"{CB}functions.{name}:{idx}{AB}{args}{CE}"


W0 = call("get_weather", 0, '{"city": "Paris"}')
P = ("get_weather", '{"city": "Paris"}')

TOOL_VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "Hello! How can I help?", Split(content="Hello! How can I help?")),
    ("one call", SB + W0 + SE, Split(calls=(P,))),
    ("content before the call is kept verbatim", "Let me check.\n" + SB + W0 + SE,
     Split(content="Let me check.\n", calls=(P,))),
    ("whitespace-only content before a call is dropped", "\n\n " + SB + W0 + SE, Split(calls=(P,))),
    ("whitespace-only content without a call stays", "\n\n", Split(content="\n\n")),
    ("whitespace before a section without calls stays", "\n" + SB + SE, Split(content="\n")),
    ("leading whitespace before text stays", "  hi " + SB + W0, Split(content="  hi ", calls=(P,))),
    ("two calls", SB + W0 + call("ping", 1, "{}") + SE, Split(calls=(P, ("ping", "{}")))),
    ("arguments are the raw text, not re-serialized", SB + call("f", 0, '{"a":1,"b":1.50}') + SE,
     Split(calls=(("f", '{"a":1,"b":1.50}'),))),
    ("arguments are stripped", SB + f"{CB}functions.f:0{AB}\n  {{\"a\": 1}}\n {CE}" + SE,
     Split(calls=(("f", '{"a": 1}'),))),
    ("empty arguments are {}", SB + f"{CB}functions.ping:0{AB}{CE}" + SE, Split(calls=(("ping", "{}"),))),
    ("whitespace-only arguments are {}", SB + f"{CB}functions.ping:0{AB} \n{CE}" + SE, Split(calls=(("ping", "{}"),))),
    ("unicode arguments stay as written", SB + call("f", 0, '{"c": "東京 \\u00e9 😀"}') + SE,
     Split(calls=(("f", '{"c": "東京 \\u00e9 😀"}'),))),
    ("text between calls and after the section is dropped", SB + W0 + " and " + call("ping", 1, "{}") + SE + "done.",
     Split(calls=(P, ("ping", "{}")))),
    ("a call after the section end still counts", SB + W0 + SE + "x" + call("ping", 1, "{}"),
     Split(calls=(P, ("ping", "{}")))),
    ("the section end also ends a call", SB + f"{CB}functions.f:0{AB}{{}}{SE}", Split(calls=(("f", "{}"),))),
    ("other markers inside arguments are text", SB + call("f", 0, f'{{"s": "{CB}{AB}{SB}"}}') + SE,
     Split(calls=(("f", f'{{"s": "{CB}{AB}{SB}"}}'),))),
    ("markers outside a section are content", f"Use {CB} or {CE}.", Split(content=f"Use {CB} or {CE}.")),
    ("a header without an index makes no call", "x" + SB + f'{CB}get_weather{AB}{{"city": "Paris"}}{CE}' + SE,
     Split(content="x")),
    ("a header without the prefix", SB + f'{CB}get_weather:0{AB}{{"city": "Paris"}}{CE}', Split(calls=(P,))),
    ("a header with whitespace", SB + f'{CB} functions.get_weather:0 \n{AB}{{"city": "Paris"}}{CE}', Split(calls=(P,))),
    ("a name with dots keeps them", SB + call("a.b", 0, "{}"), Split(calls=(("a.b", "{}"),))),
    ("an empty name makes no call", SB + f"{CB}functions.:0{AB}{{}}{CE}", Split()),
    ("a header that is not an id, with empty arguments: named by the header",
     SB + f"{CB}ping{AB}{CE}", Split(calls=(("ping", "{}"),))),
    ("a malformed call then a good one", SB + f'{CB}oops{AB}{{"a": 1}}{CE}' + call("ping", 1, "{}"),
     Split(calls=(("ping", "{}"),))),
    ("an unknown function is still a call", SB + call("not_a_tool", 0, "{}"), Split(calls=(("not_a_tool", "{}"),))),
    ("unclosed call keeps its arguments", SB + f'{CB}functions.f:0{AB}{{"q": "a lo', Split(calls=(("f", '{"q": "a lo'),))),
    ("cut inside a header with an id", SB + f"{CB}functions.get_weather:0", Split(calls=(("get_weather", "{}"),))),
    ("cut inside a header without one", SB + f"{CB}functions.get_wea", Split(calls=(("functions.get_wea", "{}"),))),
    ("a partial marker at the end is content", "Use <|tool_calls_sec", Split(content="Use <|tool_calls_sec")),
    ("a partial end marker inside arguments is arguments", SB + f"{CB}functions.f:0{AB}{{}}<|tool_ca",
     Split(calls=(("f", "{}<|tool_ca"),))),
    ("think tags are not the tool parser's", "<think>a</think>b", Split(content="<think>a</think>b")),
]

REASONING_VECTORS: list[tuple[str, str, ParserContext, Split]] = [
    ("reasoning then content", "<think>Let me see.</think>Hello", AUTO, Split(content="Hello", reasoning="Let me see.")),
    ("no start tag", "Let me see.</think>Hello", AUTO, Split(content="Hello", reasoning="Let me see.")),
    ("trailing whitespace of the reasoning is dropped", "<think>a \n b\n\n</think>\n\nHi", AUTO,
     Split(content="\n\nHi", reasoning="a \n b")),
    ("cut inside the reasoning: all reasoning, stripped", "<think>still thinking  ", AUTO,
     Split(reasoning="still thinking")),
    ("no tags at all: reasoning (vLLM's non-streaming answer)", "Hello there.", AUTO, Split(reasoning="Hello there.")),
    ("every <think> in the reasoning is dropped", "<think>one<think>two</think>three<think>four", AUTO,
     Split(content="three<think>four", reasoning="onetwo")),
    ("every </think> after the reasoning is dropped", "<think>a</think>b</think>c</think>", AUTO,
     Split(content="bc", reasoning="a")),
    ("a tool-call section ends the reasoning; the marker is content", f"<think>call it {SB}{W0}", AUTO,
     Split(content=SB + W0, reasoning="call it")),
    ("a section after the reasoning is content", f"<think>r</think>x{SB}", AUTO, Split(content=f"x{SB}", reasoning="r")),
    ("a partial tag at the end of reasoning is reasoning", "<think>a </thi", AUTO, Split(reasoning="a </thi")),
    ("thinking off: everything is content", "<think>a</think>b", OFF, Split(content="<think>a</think>b")),
    ("enable_thinking off too", "<think>a</think>b", ParserContext(chat_template_kwargs={"enable_thinking": False}),
     Split(content="<think>a</think>b")),
]


@pytest.mark.parametrize(("label", "text", "expected"), TOOL_VECTORS, ids=[v[0] for v in TOOL_VECTORS])
def test_tool_vector_one_shot_and_streamed(label: str, text: str, expected: Split) -> None:
    assert one_shot(T, text) == expected
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(T, chunks) == expected, chunks


@pytest.mark.parametrize(("label", "text", "ctx", "expected"), REASONING_VECTORS, ids=[v[0] for v in REASONING_VECTORS])
def test_reasoning_vector_one_shot_and_streamed(label: str, text: str, ctx: ParserContext, expected: Split) -> None:
    assert one_shot(R, text, ctx) == expected
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(R, chunks, ctx) == expected, chunks


@pytest.mark.parametrize(("kwargs", "on"), [
    ({}, True), ({"thinking": None}, True), ({"thinking": True}, True), ({"thinking": False}, False),
    ({"enable_thinking": False}, False), ({"thinking": False, "enable_thinking": True}, True),
    ({"thinking": 0, "enable_thinking": None}, False)])
def test_thinking_switch_reads_both_kwargs_as_vllm(kwargs: dict[str, Any], on: bool) -> None:
    assert thinking_enabled(kwargs) is on


def _ids(text: str, chunks: list[str] | None = None, ctx: ParserContext = AUTO) -> list[tuple[str | None, str]]:
    parser = T(ctx)
    deltas: list[ParsedDelta] = []
    for chunk in chunks if chunks is not None else [text]:
        deltas.append(parser.feed(chunk))
        parser = T.restore(ctx, json.loads(json.dumps(parser.snapshot())))
    deltas.append(parser.finish())
    return [(tc.id, tc.name or "") for d in deltas for tc in d.tool_calls if tc.name is not None]


def test_call_ids_are_the_models_headers() -> None:
    text = SB + W0 + f"{CB} get_weather:7 {AB}{{}}{CE}" + call("a.b", 3, "{}") + SE
    want = [("functions.get_weather:0", "get_weather"), ("get_weather:7", "get_weather"), ("functions.a.b:3", "a.b")]
    assert _ids(text) == want
    for chunks in random_splits(text, seed=3):
        assert _ids(text, chunks) == want


def test_a_call_named_by_its_header_gets_vllms_kimi_id_counting_from_zero() -> None:
    text = SB + W0 + f"{CB}ping{AB}{CE}" + f"{CB}pong{AB}{CE}" + f"{CB}functions.cut"
    want = [("functions.get_weather:0", "get_weather"), ("functions.ping:0", "ping"), ("functions.pong:1", "pong"),
            ("functions.functions.cut:2", "functions.cut")]
    assert _ids(text) == want
    for chunks in random_splits(text, seed=5):
        assert _ids(text, chunks) == want


def test_call_id_reading_matches_vllms_regex() -> None:
    assert call_id_and_name("functions.get_weather:0") == ("functions.get_weather:0", "get_weather")
    assert call_id_and_name("  functions.f:12\n") == ("functions.f:12", "f")
    assert call_id_and_name("functions.a:1:2") == ("functions.a:1:2", "a")  # the last :N ends the id
    assert call_id_and_name("functions.f:0<|tool_call_end|>") == ("functions.f:0", "f")
    assert call_id_and_name("functions.f\n:0") is None  # "." does not cross a newline
    assert call_id_and_name("get_weather") is None
    assert call_id_and_name("functions.:0") is None


def test_tool_choice_none_keeps_whitespace_before_the_dropped_calls() -> None:
    # vLLM makes no call slots when tool_choice is "none", so its whitespace-only content stays
    assert one_shot(T, "\n" + SB + W0, NONE).content == "\n"
    assert streamed(T, ["\n", SB, W0], NONE).content == "\n"


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    ctx = ParserContext(tools=TOOLS, parallel_tool_calls=False)
    assert one_shot(T, SB + W0 + call("ping", 1, "{}"), ctx) == Split(calls=(P,))


def test_a_header_too_long_drops_its_call() -> None:
    long = SB + CB + "x" * (HEAD_MAX + 50) + ":0" + AB + "{}" + CE + call("ping", 1, "{}")
    assert one_shot(T, long) == Split(calls=(("ping", "{}"),))
    assert streamed(T, split_at(long, range(0, len(long), 7))) == Split(calls=(("ping", "{}"),))


def test_arguments_stream_as_generated() -> None:
    parser = T(AUTO)
    assert parser.feed(SB + CB + "functions.write:0" + AB).tool_calls[0].name == "write"
    got = [parser.feed(piece) for piece in ('{"text": "', "hello", " world", '"}')]
    assert [d.tool_calls[0].arguments if d.tool_calls else "" for d in got] == ['{"text": "', "hello", " world", '"}']


def test_attributes() -> None:
    assert TOOL_PARSERS["kimi_k2"] is T and REASONING_PARSERS["kimi_k2"] is R
    assert T.needs_special_tokens and R.needs_special_tokens  # the markers and think tags are special tokens
    assert T.engine_based and R.engine_based and not T.supports_required_and_named
    assert T.call_id_style == "kimi"


def _snapshot_size(cls: Any, ctx: ParserContext, text: str, step: int = 97) -> int:
    parser, worst = cls(ctx), 0
    for k in range(0, len(text), step):
        parser.feed(text[k:k + step])
        worst = max(worst, len(json.dumps(parser.snapshot())))
    return worst


def test_snapshots_stay_small_on_long_outputs() -> None:
    args = '{"text": "' + ("lorem ipsum dolor sit amet " * 800) + '"}'
    assert _snapshot_size(T, AUTO, SB + CB + "functions.write:0" + AB + args + CE) < 1024
    assert _snapshot_size(T, AUTO, SB + CB + "functions.write:0" + AB + '{"t": "' + " " * 20000) < 1024
    assert _snapshot_size(T, AUTO, " " * 20000 + "x") < 1024
    assert _snapshot_size(T, AUTO, SB + CB + "y" * 20000) < 1024
    assert _snapshot_size(R, AUTO, "<think>" + "thinking hard about it " * 900 + " " * 5000) < 1024


FRAGMENTS = [SB, SE, CB, AB, CE, "<|tool_call", "<|tool_calls_sec", "<think>", "</think>", "</thi",
             "functions.get_weather:0", "functions.f:1", "get_weather", "functions.", ":", "0", "{", "}", '"a"', ": ",
             '"x y"', " ", "\n", "  ", "\t", "x", "é", "東京", "<", "|", ",", '"', "\\"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
CTXS = [AUTO, NONE, OFF, ParserContext(tools=TOOLS, parallel_tool_calls=False)]


def _chain(chunks: list[str], ctx: ParserContext) -> tuple[Split, list[tuple[str | None, str]]]:
    """Reasoning parser, its content into the tool parser, as the derenderer chains them; both
    rebuilt from their JSON snapshots between feeds."""
    reasoning, tool = R(ctx), T(ctx)
    deltas, ids = [], []
    for chunk in [*chunks, None]:
        r = reasoning.feed(chunk) if chunk is not None else reasoning.finish()
        t = tool.feed(r.content)
        if chunk is None:
            t.extend(tool.finish())
        t.reasoning = r.reasoning
        deltas.append(t)
        ids += [(tc.id, tc.name or "") for tc in t.tool_calls if tc.name is not None]
        if chunk is not None:
            reasoning = R.restore(ctx, json.loads(json.dumps(reasoning.snapshot())))
            tool = T.restore(ctx, json.loads(json.dumps(tool.snapshot())))
    return fold(deltas), ids


@settings(max_examples=300, deadline=None)
@given(text=texts, data=st.data())
def test_any_split_of_kimi_output_equals_one_shot(text: str, data: st.DataObject) -> None:
    ctx = data.draw(st.sampled_from(CTXS))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert _chain(split_at(text, cuts), ctx) == _chain([text], ctx)
    assert streamed(T, split_at(text, cuts), ctx) == one_shot(T, text, ctx)
    assert streamed(R, split_at(text, cuts), ctx) == one_shot(R, text, ctx)


def test_the_reasoning_and_content_guards_are_offered_with_nothing_held() -> None:
    check_think_guards(R(AUTO))


@pytest.mark.parametrize("ctx", [AUTO, NONE, OFF, ParserContext(tools=TOOLS, parallel_tool_calls=False)],
                         ids=["auto", "none", "thinking_off", "serial"])
def test_the_args_shortcut_inside_the_arguments_splits_as_feeding(ctx: ParserContext) -> None:
    second = CB + "functions.get_weather:1" + AB
    chunks = ["plan", "</think>", "Let me", " write.", SB, CB, "functions.get_weather:0", AB, " ", " {", '"city": "', "Pa",
              "ris", " is", " a ", "< b", " city", "\n", " of ", " 東京 😀", ' "q"', " x <", " y", " z<|tool_call",
              "_end", "|", '"}', " ", "\n ", CE, second, '{"city": "', "Ro", "me ", "x", '"}  ', CE, SE]
    reasoning, tool = R(ctx), T(ctx)
    offered = {}
    for chunk in chunks:
        tool.feed(reasoning.feed(chunk).content)
        if chunk in (" ", "ris", " a ", " z<|tool_call", "me ", "x"):
            offered[chunk] = tool.plain_args_call()
            assert tool.plain_args_guard() == "<" and tool.plain_args_hold_space
            assert reasoning.passthrough if ctx is OFF else reasoning.plain_content_guard() == "<"
    # (leading whitespace still skipped at " ", whitespace held at " a " and "me ", a partial marker
    # held at "<|tool_call"; the second call is not reported with parallel_tool_calls false)
    assert offered == {" ": None, "ris": 0, " a ": None, " z<|tool_call": None, "me ": None,
                       "x": 1 if ctx.parallel_tool_calls else None}
    skipped: list[str] = []
    assert skipping(T(ctx), chunks, R(ctx), skipped) == _chain(["".join(chunks)], ctx)[0]
    assert len(skipped) >= 4  # (Pa, ris, is, city, 東京 😀, y, Ro: where nothing is held)


def test_a_text_ending_in_whitespace_is_not_the_arguments_as_it_is() -> None:
    # why plain_args_hold_space: the trailing whitespace is held (vLLM strips the arguments)
    parser = T(AUTO)
    parser.feed(SB + CB + "functions.get_weather:0" + AB + '{"city": "Pa')
    assert parser.plain_args_call() == 0
    assert [d.arguments for d in parser.feed("ris ").tool_calls] == ["ris"]
    assert parser.plain_args_call() is None
    assert [d.arguments for d in parser.feed('"}').tool_calls] == [' "}']


@pytest.mark.parametrize("cls", [T, R])
def test_restore_refuses_bad_snapshots(cls: Any) -> None:
    from session.parsers import MalformedSnapshot

    good = cls(AUTO).snapshot()
    for bad in ({}, {**good, "p": "hermes"}, {k: v for k, v in good.items() if k != "b"}, {**good, "m": "nowhere"}):
        with pytest.raises(MalformedSnapshot):
            cls.restore(AUTO, bad)
