"""qwen3_coder / qwen3_xml (Qwen3-Coder, Qwen3.5 ``<tool_call><function=…><parameter=…>`` calls), its
seed_oss / mimo variants and the seed_oss / step3p5 reasoning parsers: vectors with the split vLLM
0.32's engine grammar (``vllm/parser/qwen3.py``) gives, checked against vLLM by running it (the
recorded parity cases: tests/data/vllm/parsers/qwen3_xml.json), one-shot and over random splits with
the state through JSON between feeds; schema-typed values; the state stays small."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS, TOOL_PARSERS
from session.parsers.base import ParsedDelta, ParserContext, ToolCallDelta
from session.parsers.errors import MalformedSnapshot
from session.parsers.reasoning.qwen3 import (
    Qwen3ReasoningParser,
    SeedOssReasoningParser,
    Step3p5ReasoningParser,
)
from session.parsers.tool import HermesToolParser
from session.parsers.tool.json_stream import is_plain
from session.parsers.tool.qwen3_xml import VALUE_CAP, MiMoToolParser, Qwen3XmlToolParser, SeedOssToolParser
from session.parsers.tool.schema_values import coerce, properties_of, value_types

from .parsers_harness import Split, fold, one_shot, random_splits, split_at, streamed

P = Qwen3XmlToolParser
PROPS: dict[str, Any] = {
    "city": {"type": "string"}, "days": {"type": "integer"}, "ratio": {"type": "number"},
    "detail": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"},
    "maybe": {"type": ["string", "null"]}, "units": {"enum": ["c", "f"]}, "free": {},
    "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "count": {"type": "int"},
}
TOOLS = ({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": PROPS}}},
         {"type": "function", "function": {"name": "no_schema", "parameters": {"type": "object"}}})
CTX = ParserContext(tools=TOOLS)
NONE_CTX = ParserContext(tools=TOOLS, tool_choice="none")
NO_TOOLS = ParserContext()
SERIAL = ParserContext(tools=TOOLS, parallel_tool_calls=False)
THINKING = ParserContext(tools=TOOLS, prompt_opens_reasoning=True, reasoning_configured=True)  # a reasoning parser runs


def call(name: str, /, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


W = call("get_weather", city="Paris")
WJ = '{"city": "Paris"}'

# (label, context, text, expected): the split vLLM 0.32 gives (non-streaming, or its stream where a
# stream cannot match it: docs/parsers.md)
VECTORS: list[tuple[str, ParserContext, str, Split]] = [
    ("plain content", CTX, "The capital of France is Paris.", Split(content="The capital of France is Paris.")),
    ("one call", CTX, W, Split(calls=(("get_weather", WJ),))),
    ("content before the call keeps its whitespace (vLLM's stream)", CTX, "\n\nLet me check.\n" + W,
     Split(content="\n\nLet me check.\n", calls=(("get_weather", WJ),))),
    ("whitespace-only content before a call is dropped", CTX, "\n\n" + W, Split(calls=(("get_weather", WJ),))),
    ("whitespace after the calls is dropped", CTX, W + "\n\n", Split(calls=(("get_weather", WJ),))),
    ("text after a call is content, its leading whitespace dropped", CTX, W + "\nDone now.",
     Split(content="Done now.", calls=(("get_weather", WJ),))),
    ("text between calls is content", CTX, "A\n" + W + "\nmiddle\n" + call("get_weather", city="Rome") + "\nend",
     Split(content="A\n\nmiddle\n\nend", calls=(("get_weather", WJ), ("get_weather", '{"city": "Rome"}')))),
    ("two calls", CTX, call("get_weather", city="Paris", days="3") + "\n" + call("get_weather", city="Rome", detail="true"),
     Split(calls=(("get_weather", '{"city": "Paris", "days": 3}'), ("get_weather", '{"city": "Rome", "detail": true}')))),
    ("values typed by the schema", CTX,
     call("get_weather", city="Paris", days="03", ratio="1.50", detail="True", opts='{"a": [1,2]}', tags='[1, "x"]',
          maybe="null", free="5", unknown="7", units="c", either="12", count="-4"),
     Split(calls=(("get_weather", '{"city": "Paris", "days": 3, "ratio": 1.5, "detail": true, "opts": {"a": [1, 2]}, '
                   '"tags": [1, "x"], "maybe": null, "free": "5", "unknown": "7", "units": "c", "either": 12, '
                   '"count": -4}'),))),
    ("values that do not convert stay strings", CTX,
     call("get_weather", days="three", ratio="nan", detail="yes", opts='{"a": 1,', either="x y"),
     Split(calls=(("get_weather", '{"days": "three", "ratio": "nan", "detail": "yes", "opts": "{\\"a\\": 1,", '
                   '"either": "x y"}'),))),
    ("a number that is an integer is written as one", CTX, call("get_weather", ratio="2.0"),
     Split(calls=(("get_weather", '{"ratio": 2}'),))),
    ("no schema: every value a string", CTX, call("no_schema", days="3", flag="true"),
     Split(calls=(("no_schema", '{"days": "3", "flag": "true"}'),))),
    ("no tools known: every value a string", ParserContext(tools=(), tool_choice="auto"), call("get_weather", days="3"),
     Split(calls=(("get_weather", '{"days": "3"}'),))),
    ("an unknown function is still a call", CTX, call("nope", q="1"), Split(calls=(("nope", '{"q": "1"}'),))),
    ("unicode, quotes, backslashes and tabs are escaped as json.dumps does", CTX,
     call("get_weather", city='東京 "quoted" \\ back\ttab 😀'),
     Split(calls=(("get_weather", '{"city": "東京 \\"quoted\\" \\\\ back\\ttab 😀"}'),))),
    ("one newline at each end of a value is markup", CTX, call("get_weather", city="\nline1\nline2\n\n"),
     Split(calls=(("get_weather", '{"city": "\\nline1\\nline2\\n\\n"}'),))),
    ("values without newlines, numbers with spaces", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=city>X</parameter><parameter=days> 7 </parameter>"
     "</function></tool_call>", Split(calls=(("get_weather", '{"city": "X", "days": 7}'),))),
    ("a repeated parameter is sent as it comes", CTX,
     call("get_weather", city="A", days="1").replace("</function>", "<parameter=city>\nB\n</parameter>\n</function>"),
     Split(calls=(("get_weather", '{"city": "A", "days": 1, "city": "B"}'),))),
    ("no parameters", CTX, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
     Split(calls=(("get_weather", "{}"),))),
    ("a bare <function=> without <tool_call> is a call", CTX,
     "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>", Split(calls=(("get_weather", WJ),))),
    ("a missing </parameter> ends the value at the next <parameter=", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n2\n</parameter>\n</function>",
     Split(calls=(("get_weather", '{"city": "Paris", "days": 2}'),))),
    ("a typed parameter still open at </function> is dropped", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n2\n</function>\n</tool_call>",
     Split(calls=(("get_weather", WJ),))),
    ("whitespace inside the parameter tags; a name keeps its trailing spaces", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter= city >\nX\n</parameter>\n<  parameter  =  days>\n4\n"
     "<  /  parameter  >\n</function>\n</tool_call>", Split(calls=(("get_weather", '{"city ": "X", "days": 4}'),))),
    ("</function> inside a parameter name ends the call there", CTX,
     "<function=get_weather><parameter=days>1</parameter><parameter=b</function><parameter=c>z</parameter>",
     Split(calls=(("get_weather", '{"days": 1}'),))),
    ("an empty parameter name", CTX, "<tool_call>\n<function=get_weather>\n<parameter=>\nX\n</parameter>\n</function>",
     Split(calls=(("get_weather", '{"": "X"}'),))),
    ("the function name is stripped", CTX,
     "<tool_call>\n<function= get_weather \n>\n<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>",
     Split(calls=(("get_weather", '{"days": 4}'),))),
    ("a marker inside the name is part of it", CTX,
     "<tool_call>\n<function=get<think>x>\n<parameter=city>\nX\n</parameter>\n</function>\n</tool_call>",
     Split(calls=(("get<think>x", '{"city": "X"}'),))),
    ("an empty name drops the call", CTX, "<tool_call>\n<function=>\n<parameter=city>\nX\n</parameter>\n</function>\n"
     "</tool_call>", Split()),
    ("JSON inside <tool_call> is not this format: dropped", CTX,
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', Split()),
    ("an empty block, then text", CTX, "<tool_call></tool_call>\nHello", Split(content="Hello")),
    ("</function> inside the name ends the call", CTX, "<tool_call>\n<function=get_weather</function>\n</tool_call>",
     Split(calls=(("get_weather", "{}"),))),
    ("a missing </function>: the rest is that call's body", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n</tool_call>\n<tool_call>\n"
     "<function=other>\n<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>",
     Split(calls=(("get_weather", '{"city": "X", "days": 5}'),))),
    ("</think> in content is dropped when a reasoning parser read the prompt; inside a value it is kept", THINKING,
     call("get_weather", city="a</think>b") + "x</think>y", Split(content="xy", calls=(("get_weather", '{"city": "a</think>b"}'),))),
    ("without a reasoning parser </think> in content is text", CTX, call("get_weather", city="a") + "x</think>y",
     Split(content="x</think>y", calls=(("get_weather", '{"city": "a"}'),))),
    ("a marker-like text that is not a marker", CTX, "a <tool_cal> b <function c", Split(content="a <tool_cal> b <function c")),
    ("a partial marker at the end is content", CTX, "Use <tool_c", Split(content="Use <tool_c")),
    ("objects and arrays are re-serialized", CTX,
     call("get_weather", opts='{"a": 1, "b": [1, 2.50, "x"], "c": {"d": null}}', city="X"),
     Split(calls=(("get_weather", '{"opts": {"a": 1, "b": [1, 2.5, "x"], "c": {"d": null}}, "city": "X"}'),))),
    ("parallel_tool_calls false keeps the first call", SERIAL, W + "\n" + call("get_weather", city="Rome"),
     Split(calls=(("get_weather", WJ),))),
    # cut short (finish_reason "length")
    ("cut inside a string value: what streamed stays, closed", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar\n", Split(calls=(("get_weather", '{"city": "Par"}'),))),
    ("a string parameter still open at </function> is closed", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n<parameter=city>\nParis\n</function>",
     Split(calls=(("get_weather", '{"days": 2, "city": "Paris"}'),))),
    ("cut inside a typed value: it is dropped", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n<parameter=days>\n12",
     Split(calls=(("get_weather", '{"city": "X"}'),))),
    ("cut between parameters", CTX, "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n",
     Split(calls=(("get_weather", '{"city": "X"}'),))),
    ("cut inside a parameter name", CTX,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n<parameter=da",
     Split(calls=(("get_weather", '{"city": "X"}'),))),
    ("cut inside the function name: a call with no arguments", CTX, "<tool_call>\n<function=get_wea",
     Split(calls=(("get_wea", "{}"),))),
    ("cut after <tool_call>", CTX, "\n\nHi\n<tool_call>\n", Split(content="\n\nHi\n")),
    # tool_choice "none" (with tools: the calls are dropped before they are calls) and no tools
    ("tool_choice none: the call markup is dropped, the content kept", NONE_CTX, "\n\nA " + W + " B",
     Split(content="\n\nA  B")),
    ("tool_choice none: whitespace around a dropped call is content", NONE_CTX, "\n\n" + W + "\nB",
     Split(content="\n\n\nB")),
    ("no tools: the call markup is dropped", NO_TOOLS, "\n\nA " + W + " B", Split(content="\n\nA  B")),
]
IDS = [v[0] for v in VECTORS]


@pytest.mark.parametrize(("label", "ctx", "text", "expected"), VECTORS, ids=IDS)
def test_qwen3_xml_vector_one_shot(label: str, ctx: ParserContext, text: str, expected: Split) -> None:
    assert one_shot(P, text, ctx) == expected


@pytest.mark.parametrize(("label", "ctx", "text", "expected"), VECTORS, ids=IDS)
def test_qwen3_xml_vector_streamed_over_splits_with_state_round_trips(label: str, ctx: ParserContext, text: str,
                                                                      expected: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks, ctx) == expected, chunks


def test_calls_are_counted_only_when_reported() -> None:
    for ctx, made in ((CTX, 1), (NONE_CTX, 0), (NO_TOOLS, 0)):
        parser = P(ctx)
        parser.feed(W)
        parser.finish()
        assert parser.calls_made == made


def test_arguments_stream_as_they_come() -> None:
    """A string value arrives over the deltas it was generated in; a typed one once complete."""
    parser = P(CTX)
    head = parser.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nPa")
    assert [(d.index, d.name, d.arguments) for d in head.tool_calls] == [(0, "get_weather", ""), (0, None, '{"city": "Pa')]
    assert [d.arguments for d in parser.feed("ris").tool_calls] == ["ris"]
    assert [d.arguments for d in parser.feed("\n</parameter>\n<parameter=days>\n1").tool_calls] == ['"']
    assert [d.arguments for d in parser.feed("2\n</parameter>\n").tool_calls] == [', "days": 12']
    assert [d.arguments for d in parser.feed("</function>\n</tool_call>").tool_calls] == ["}"]
    assert not parser.finish()


def _skipping(parser: Qwen3XmlToolParser, chunks: list[str]) -> Split:
    """Feed ``chunks`` as the derenderer does: a chunk the args shortcut covers is not fed."""
    out: list[ParsedDelta] = []
    for chunk in chunks:
        call = parser.plain_args_call()
        if call is not None and is_plain(chunk) and parser.plain_args_guard() not in chunk:
            out.append(ParsedDelta(tool_calls=[ToolCallDelta(index=call, arguments=chunk)]))
        else:
            out.append(parser.feed(chunk))
    out.append(parser.finish())
    return fold(out)


@pytest.mark.parametrize("cls", [Qwen3XmlToolParser, SeedOssToolParser, MiMoToolParser])
@pytest.mark.parametrize("ctx", [CTX, SERIAL, NONE_CTX, NO_TOOLS], ids=["auto", "serial", "none", "no_tools"])
def test_the_args_shortcut_inside_a_string_value_splits_as_feeding(cls: type[Qwen3XmlToolParser],
                                                                   ctx: ParserContext) -> None:
    start = "<seed:tool_call>" if cls is SeedOssToolParser else "<tool_call>"
    end = "</seed:tool_call>" if cls is SeedOssToolParser else "</tool_call>"
    head = [start, "\n<function=get_weather>\n<parameter=city>\n", "Pa", "ris"]
    chunks = [*head, " is", " a < b", " city", "\n", "\n", " of", " 東京 😀", ' "q"', "\n</parameter>\n</function>\n", end]
    parser = cls(ctx)
    for chunk in head:
        parser.feed(chunk)
    reported = ctx in (CTX, SERIAL)  # (no tools: untyped values are held until complete)
    assert parser.plain_args_call() == (0 if reported else None)
    assert parser.plain_args_guard() == "<"
    assert _skipping(cls(ctx), chunks) == one_shot(cls, "".join(chunks), ctx)


def test_a_long_string_value_streams_and_the_state_stays_small() -> None:
    body = "x = 1\n" * 4000  # 24k characters of code
    text = "<tool_call>\n<function=write>\n<parameter=path>\na.py\n</parameter>\n<parameter=body>\n" + body
    parser = P(CTX)
    sizes, out = [], []
    for k in range(0, len(text), 7):
        out.append(parser.feed(text[k:k + 7]))
        sizes.append(len(json.dumps(parser.snapshot())))
        parser = P.restore(CTX, json.loads(json.dumps(parser.snapshot())))
    out.append(parser.feed("\n</parameter>\n</function>\n</tool_call>"))
    out.append(parser.finish())
    assert max(sizes) < 1024
    assert fold(out).calls == (("write", json.dumps({"path": "a.py", "body": body}, ensure_ascii=False)),)


def test_a_long_typed_value_streams_as_json_with_a_small_state() -> None:
    value = json.dumps({"rows": [{"k": i, "v": "é" * 3, "f": 1.50} for i in range(800)]})
    text = call("get_weather", opts=value)
    parser = P(CTX)
    sizes, out = [], []
    for k in range(0, len(text), 5):
        out.append(parser.feed(text[k:k + 5]))
        sizes.append(len(json.dumps(parser.snapshot())))
        parser = P.restore(CTX, json.loads(json.dumps(parser.snapshot())))
    out.append(parser.finish())
    assert max(sizes) < 1024
    assert fold(out).calls == (("get_weather", json.dumps({"opts": json.loads(value)}, ensure_ascii=False)),)
    assert sum(1 for d in out for c in d.tool_calls if c.arguments) > 100  # streamed, not sent at the end


def test_a_long_value_that_is_not_json_stays_a_string() -> None:
    value = "not json " * (VALUE_CAP // 4)
    assert one_shot(P, call("get_weather", opts=value), CTX).calls == (
        ("get_weather", json.dumps({"opts": value}, ensure_ascii=False)),)
    # typed integer / string: a long text is the string it stays
    assert one_shot(P, call("get_weather", either=value), CTX).calls == (
        ("get_weather", json.dumps({"either": value}, ensure_ascii=False)),)


def test_snapshot_of_another_parser_or_malformed_is_refused() -> None:
    with pytest.raises(MalformedSnapshot):
        P.restore(CTX, HermesToolParser(CTX).snapshot())
    good = P(CTX)
    good.feed("<tool_call>\n<function=get_weather>\n<parameter=opts>\n{")
    snap = good.snapshot()
    for key, bad in (("w", 7), ("s", "?"), ("t", "?"), ("m", "nowhere")):
        with pytest.raises(MalformedSnapshot):
            P.restore(CTX, {**snap, key: bad})
    broken = {k: v for k, v in snap.items() if k != "k"}
    with pytest.raises(MalformedSnapshot):
        P.restore(CTX, broken)


FRAGMENTS = ["<tool_call>", "</tool_call>", "<tool_c", "<function=", "get_weather", ">", "</function>", "</func",
             "<parameter=", "city", "days", "opts", "</parameter>", "</param", "<", " ", "\n", "\n\n", "< /parameter >",
             "<think>", "</think>", "Paris", "12", "1.5", "true", "null", '{"a": [1, ', "]}", '"', "\\", "東京", "😀", "x"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=50).map("".join)


@pytest.mark.parametrize("cls", [Qwen3XmlToolParser, SeedOssToolParser, MiMoToolParser], ids=lambda c: c.name)
@pytest.mark.parametrize("ctx", [CTX, NONE_CTX, NO_TOOLS, SERIAL, THINKING], ids=["auto", "none", "no-tools", "serial",
                                                                     "thinking"])
@settings(max_examples=200, deadline=None)
@given(text=texts, data=st.data())
def test_any_split_with_state_round_trips_equals_one_shot(cls: type[Qwen3XmlToolParser], ctx: ParserContext,
                                                         text: str, data: st.DataObject) -> None:
    expected = one_shot(cls, text, ctx)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(cls, split_at(text, cuts), ctx) == expected


@settings(max_examples=200, deadline=None)
@given(text=texts, data=st.data())
def test_reasoning_then_qwen3_xml_chained_streams_like_one_shot(text: str, data: st.DataObject) -> None:
    def run(chunks: list[str]) -> Split:
        reasoning, tool = Qwen3ReasoningParser(CTX), P(CTX)
        deltas = []
        for chunk in [*chunks, None]:
            r = reasoning.feed(chunk) if chunk is not None else reasoning.finish()
            t = tool.feed(r.content)
            if chunk is None:
                t.extend(tool.finish())
            deltas.append(ParsedDelta(reasoning=r.reasoning, content=t.content, tool_calls=t.tool_calls))
            snap_r, snap_t = json.loads(json.dumps(reasoning.snapshot())), json.loads(json.dumps(tool.snapshot()))
            reasoning, tool = Qwen3ReasoningParser.restore(CTX, snap_r), P.restore(CTX, snap_t)
        return fold(deltas)

    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    assert run(split_at(text, cuts)) == run([text])


# -- seed_oss and mimo --------------------------------------------------------------------------
SEED_CALL = ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>3"
             "</parameter>\n</function>\n</seed:tool_call>")


@pytest.mark.parametrize(("text", "expected"), [
    (SEED_CALL, Split(calls=(("get_weather", '{"city": "Paris", "days": 3}'),))),
    ("Checking.\n" + SEED_CALL + "</seed:think>x", Split(content="Checking.\nx", calls=(("get_weather", '{"city": "Paris", '
                                                                                        '"days": 3}'),))),
    ("Checking.\n" + SEED_CALL, Split(content="Checking.\n", calls=(("get_weather", '{"city": "Paris", '
                                                                                      '"days": 3}'),))),
    # Qwen's <tool_call> is text for Seed-OSS, but a bare <function=…> is a call in both
    (W, Split(content="<tool_call>\n", calls=(("get_weather", WJ),))),
    ("<seed:tool_call>\n<function=a<think>b>\n</function></seed:tool_call>", Split(calls=(("a<think", "{}"),))),
])
def test_seed_oss(text: str, expected: Split) -> None:
    for chunks in random_splits(text, seed=3):
        assert streamed(SeedOssToolParser, chunks, THINKING) == expected


def test_mimo_keeps_the_newlines_of_values() -> None:
    assert one_shot(MiMoToolParser, call("get_weather", city="Paris", days="3"), CTX).calls == (
        ("get_weather", '{"city": "\\nParis\\n", "days": 3}'),)


# -- reasoning ----------------------------------------------------------------------------------
SEED_R, STEP_R = SeedOssReasoningParser, Step3p5ReasoningParser
R_VECTORS: list[tuple[str, type[Qwen3ReasoningParser], ParserContext, str, Split]] = [
    ("seed_oss: think tags", SEED_R, CTX, "<seed:think>\nplan\n</seed:think>\nanswer",
     Split(reasoning="\nplan\n", content="\nanswer")),
    ("seed_oss: a call ends reasoning", SEED_R, CTX, "<seed:think>plan " + SEED_CALL,
     Split(reasoning="plan ", content=SEED_CALL)),
    ("seed_oss: Qwen's tags are text", SEED_R, CTX, "<think>a</think>b", Split(reasoning="<think>a</think>b")),
    ("seed_oss: enable_thinking false", SEED_R, ParserContext(chat_template_kwargs={"enable_thinking": False}),
     "a</seed:think>b", Split(content="a</seed:think>b")),
    ("step3p5: trailing reasoning whitespace dropped", STEP_R, CTX, "plan\n\n</think>\nanswer",
     Split(reasoning="plan", content="\nanswer")),
    ("step3p5: inner whitespace kept", STEP_R, CTX, "a \n b \n</think>x", Split(reasoning="a \n b", content="x")),
    ("step3p5: cut short, trailing whitespace dropped", STEP_R, CTX, "plan \n", Split(reasoning="plan")),
    ("step3p5: a call ends reasoning, whitespace before it dropped", STEP_R, CTX, "plan\n" + W,
     Split(reasoning="plan", content=W)),
    ("step3p5: enable_thinking is ignored", STEP_R, ParserContext(chat_template_kwargs={"enable_thinking": False}),
     "plan</think>x", Split(reasoning="plan", content="x")),
    ("qwen3: a call inside the think block ends reasoning", Qwen3ReasoningParser, CTX,
     "<think>\nplan\n" + W + "\n</think>\n\nok", Split(reasoning="\nplan\n", content=W + "\n</think>\n\nok")),
]


@pytest.mark.parametrize(("label", "cls", "ctx", "text", "expected"), R_VECTORS, ids=[v[0] for v in R_VECTORS])
def test_reasoning_vectors(label: str, cls: type[Qwen3ReasoningParser], ctx: ParserContext, text: str,
                           expected: Split) -> None:
    assert one_shot(cls, text, ctx) == expected
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(cls, chunks, ctx) == expected, chunks


def test_step3p5_state_stays_small_over_long_whitespace() -> None:
    text = "plan" + " \n" * 10000 + "more"
    parser = STEP_R(CTX)
    out = []
    for k in range(0, len(text), 3):
        out.append(parser.feed(text[k:k + 3]))
        assert len(json.dumps(parser.snapshot())) < 1024
    out.append(parser.finish())
    assert fold(out).reasoning == text


def test_qwen3_call_inside_think_then_the_tool_parser() -> None:
    """Qwen3.5 may call a tool inside its think block: reasoning ends at <tool_call>, the call is
    parsed, the stray </think> after it is dropped from content."""
    text = "<think>\nplan\n" + W + "\n</think>\n\nok"
    reasoning, tool = Qwen3ReasoningParser(THINKING), P(THINKING)
    r = reasoning.feed(text)
    r.extend(reasoning.finish())
    t = tool.feed(r.content)
    t.extend(tool.finish())
    assert fold([ParsedDelta(reasoning=r.reasoning, content=t.content, tool_calls=t.tool_calls)]) == Split(
        reasoning="\nplan\n", content="ok", calls=(("get_weather", WJ),))


# -- the registry and the schema rules ----------------------------------------------------------
def test_registered_under_vllms_names() -> None:
    assert TOOL_PARSERS["qwen3_coder"] is TOOL_PARSERS["qwen3_xml"] is TOOL_PARSERS["step3p5"] is Qwen3XmlToolParser
    assert TOOL_PARSERS["seed_oss"] is SeedOssToolParser and TOOL_PARSERS["mimo"] is MiMoToolParser
    assert TOOL_PARSERS["qwen3_json"] is HermesToolParser
    assert REASONING_PARSERS["seed_oss"] is SEED_R and REASONING_PARSERS["step3p5"] is STEP_R
    assert not any(c.needs_special_tokens for c in (Qwen3XmlToolParser, SeedOssToolParser, SEED_R, STEP_R))


@pytest.mark.parametrize(("schema", "value", "expected"), [
    ({"type": "integer"}, "42", 42), ({"type": "integer"}, " 4_2 ", 42), ({"type": "integer"}, "4.0", 4.0),
    ({"type": "number"}, "4.0", 4), ({"type": "number"}, "1e3", 1000), ({"type": "number"}, "-0.25", -0.25),
    ({"type": "number"}, "inf", "inf"), ({"type": "boolean"}, " FALSE ", False), ({"type": "boolean"}, "1", True),
    ({"type": "null"}, "NULL", None), ({"type": "null"}, " null", None), ({"type": "null"}, "nil", "nil"), ({"type": "object"}, "[1]", [1]),
    ({"type": "object"}, "[NaN]", "[NaN]"), ({"type": "array"}, "3", 3), ({"type": ["integer", "null"]}, "null", None),
    ({"type": "string"}, "42", "42"), ({}, "42", "42"), ({"type": "custom"}, '{"a": 1}', {"a": 1}),
    ({"type": "custom"}, "x", "x"), ({"enum": [1, 2]}, "2", 2), ({"enum": [True]}, "true", True),
    ({"oneOf": [{"type": "boolean"}, {"type": "string"}]}, "false", False), ({"type": "float64"}, "2.5", 2.5),
    ({"type": "dict"}, '{"k": "v"}', {"k": "v"}), ({"type": "bool"}, "0", False),
])
def test_coerce_as_vllm(schema: dict[str, Any], value: str, expected: Any) -> None:
    got = coerce(value, value_types({"k": schema}, "k"))
    assert got == expected and type(got) is type(expected)


def test_properties_of() -> None:
    assert properties_of(TOOLS, "get_weather") is not None and "city" in properties_of(TOOLS, "get_weather")
    assert properties_of(TOOLS, "no_schema") == {} and properties_of(TOOLS, "missing") == {}
    assert value_types({}, "k") is None and value_types({"k": "not a schema"}, "k") is None
