"""minimax_m2 (MiniMax-M2 ``<minimax:tool_call><invoke name=…><parameter name=…>…`` calls) and the
minimax_m2 / minimax_m2_append_think reasoning parsers: vectors with the split vLLM 0.32's minimax_m2
grammar gives (read from its code and checked against the recorded answers in
tests/data/vllm/parsers/minimax_m2.json), random splits, a property test over fragments of the format,
and the snapshot bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS, TOOL_PARSERS, MalformedSnapshot
from session.parsers.base import ParsedDelta, ParserContext, ReasoningParser, ToolParser
from session.parsers.reasoning.minimax_m2 import MiniMaxM2AppendThinkReasoningParser, MiniMaxM2ReasoningParser
from session.parsers.tool.minimax_m2 import MinimaxM2ToolParser
from session.parsers.tool.schema_values import coerce, types_of

from .parsers_harness import Split, fold, one_shot, random_splits, skipping, split_at, streamed

P = MinimaxM2ToolParser
R = MiniMaxM2ReasoningParser
A = MiniMaxM2AppendThinkReasoningParser


def _tool(name: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": props or {}}
    return {"type": "function", "function": {"name": name, "parameters": params}}


TOOLS = (
    _tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}}),
    _tool("search", {"query": {"type": "string"}, "filters": {"type": "object"}, "tags": {"type": "array"},
                     "limit": {"type": "integer"}, "exact": {"type": "boolean"}, "score": {"type": "number"},
                     "cursor": {"anyOf": [{"type": "string"}, {"type": "null"}]}}),
    _tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}),
    _tool("get_time"),
    {"type": "function", "function": {"name": "untyped"}},
)
CTX = ParserContext(tools=TOOLS)
NONE = ParserContext(tools=TOOLS, tool_choice="none")
NO_TOOLS = ParserContext()
SERIAL = ParserContext(tools=TOOLS, parallel_tool_calls=False)


def call(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f'<invoke name="{name}">\n{body}</invoke>\n'


def block(*calls: str) -> str:
    return "<minimax:tool_call>\n" + "".join(calls) + "</minimax:tool_call>"


W = call("get_weather", city="Seattle")
WJ = '{"city": "Seattle"}'

# (what, content the tool parser reads, its split)
TOOL_VECTORS: list[tuple[str, str, Split]] = [
    ("plain answer", "\n\nThe answer is 4.", Split(content="\n\nThe answer is 4.")),
    ("one call", "\n\n" + block(W), Split(calls=(("get_weather", WJ),))),
    ("content before the call: its trailing whitespace is dropped",
     "\n\nLet me check.\n" + block(W), Split(content="\n\nLet me check.", calls=(("get_weather", WJ),))),
    ("text after an accepted call is dropped", "Checking.\n" + block(W) + "\nDone.",
     Split(content="Checking.", calls=(("get_weather", WJ),))),
    ("whitespace-only content before a call is dropped", "\n\n  \n" + block(call("get_time")) + "\n\n",
     Split(calls=(("get_time", "{}"),))),
    ("typed values as the schema says",
     block(call("get_weather", city="Seattle", days="3", unit="c"),
           call("search", query="rust", filters='{"year": 2024}', tags='["a", "b"]', limit="10", exact="true",
                score="0.5", cursor="null")),
     Split(calls=(("get_weather", '{"city": "Seattle", "days": 3, "unit": "c"}'),
                  ("search", '{"query": "rust", "filters": {"year": 2024}, "tags": ["a", "b"], "limit": 10, '
                             '"exact": true, "score": 0.5, "cursor": null}')))),
    ("values that do not read as their type stay strings",
     block(call("search", query="x", limit="ten", exact="yes", score="1e3", filters="{not json", tags="[1, 2,")),
     Split(calls=(("search", '{"query": "x", "limit": "ten", "exact": "yes", "score": 1000, '
                             '"filters": "{not json", "tags": "[1, 2,"}'),))),
    ("values are verbatim: whitespace kept in strings, read around numbers",
     block('<invoke name="get_weather">\n<parameter name="city">\n  Oslo \n</parameter>'
           '<parameter name="days">\n3\n</parameter></invoke>'),
     Split(calls=(("get_weather", '{"city": "\\n  Oslo \\n", "days": 3}'),))),
    ("no schema: every value is a string", block(call("untyped", a="1", b="true")),
     Split(calls=(("untyped", '{"a": "1", "b": "true"}'),))),
    ("unicode and JSON escapes",
     block(call("search", query='say "hi"\\path\tand\nnewline', tags='["é", "\\u00e9"]'), call("get_weather", city="東京 🌧")),
     Split(calls=(("search", '{"query": "say \\"hi\\"\\\\path\\tand\\nnewline", "tags": ["é", "é"]}'),
                  ("get_weather", '{"city": "東京 🌧"}')))),
    ("markup-like text inside a value",
     block(call("write_file", path="a.py", content="if a < b and b > 0:\n    return '</p>' <br/>")),
     Split(calls=(("write_file", '{"path": "a.py", "content": "if a < b and b > 0:\\n    return \'</p>\' <br/>"}'),))),
    ("three calls over two blocks", block(W, call("get_time")) + "\n" + block(call("search", query="news")),
     Split(calls=(("get_weather", WJ), ("get_time", "{}"), ("search", '{"query": "news"}')))),
    ("a function the request does not list is no call", block(call("get_stock", symbol="ACME")), Split()),
    ("refused, then accepted", block(call("get_stock", symbol="ACME"), W), Split(calls=(("get_weather", WJ),))),
    ("the name is stripped", block('<invoke name=" get_weather ">\n</invoke>'), Split(calls=(("get_weather", "{}"),))),
    ("quotes of every kind", block("<invoke name='get_weather'><parameter name='city'>Oslo</parameter>"
                                   "<parameter name=days>5</parameter></invoke><invoke name=get_time></invoke>"),
     Split(calls=(("get_weather", '{"city": "Oslo", "days": 5}'), ("get_time", "{}")))),
    ("whitespace inside the tags", block('<invoke name="get_weather">< parameter  name = "city" >Oslo< / parameter >'
                                         "</invoke>"),
     Split(calls=(("get_weather", '{"city": "Oslo"}'),))),
    ("a quoted parameter name may hold >", block('<invoke name="untyped"><parameter name="a>b">v</parameter></invoke>'),
     Split(calls=(("untyped", '{"a>b": "v"}'),))),
    ("a quoted name followed by text is a bare name", block('<invoke name="untyped"><parameter name="a"b>v</parameter>'
                                                            "</invoke>"),
     Split(calls=(("untyped", '{"\\"a\\"b": "v"}'),))),
    ("a value without </parameter> ends at the next parameter",
     block('<invoke name="get_weather"><parameter name="city">Oslo\n<parameter name="days">4</parameter></invoke>'),
     Split(calls=(("get_weather", '{"city": "Oslo\\n", "days": 4}'),))),
    ("text between parameters and an empty parameter name are skipped",
     block('<invoke name="get_weather">junk<parameter name="">x</parameter> <parameter name="city">Rome</parameter>'
           "</invoke>"),
     Split(calls=(("get_weather", '{"city": "Rome"}'),))),
    ("an unclosed invoke ends with the block (the closing tag is argument text)",
     '<minimax:tool_call><invoke name="get_weather"><parameter name="city">Oslo</parameter></minimax:tool_call>',
     Split(calls=(("get_weather", '{"city": "Oslo"}'),))),
    ("</invoke> inside a value ends the call; the cut string is closed",
     block(call("write_file", path="t", content="<b>x</invoke> tail")),
     Split(calls=(("write_file", '{"path": "t", "content": "<b>x"}'),))),
    ("an invoke without a block is a call, and the text after it is dropped",
     W + "trailing text", Split(calls=(("get_weather", WJ),))),
    ("cut inside a string value: what was streamed, closed",
     '<minimax:tool_call><invoke name="write_file"><parameter name="path">a</parameter><parameter name="content">hel',
     Split(calls=(("write_file", '{"path": "a", "content": "hel"}'),))),
    ("cut inside a typed value: that parameter is dropped",
     '<invoke name="get_weather"><parameter name="city">Oslo</parameter><parameter name="days">1',
     Split(calls=(("get_weather", '{"city": "Oslo"}'),))),
    ("cut right after the name", '<invoke name="get_weather', Split(calls=(("get_weather", "{}"),))),
    ("cut inside the name", '<invoke name="get_wea', Split()),
    ("cut inside an opener", '<invoke name="get_weather"><parameter name="ci', Split(calls=(("get_weather", "{}"),))),
    ("a repeated parameter is sent twice", block(call("get_weather", city="A").replace("</invoke>", '<parameter name="city">B</parameter></invoke>')),
     Split(calls=(("get_weather", '{"city": "A", "city": "B"}'),))),
    ("stray tags in content: </minimax:tool_call> dropped, think tags kept",
     "A</minimax:tool_call>B <think>C</think>D", Split(content="AB <think>C</think>D")),
    ("a partial marker at the end is content", "Use the <minimax:tool", Split(content="Use the <minimax:tool")),
    ("text after a refused call stays content", "Hi " + block(call("nope")) + " there",
     Split(content="Hi  there")),
    ("whitespace-only content and a refused call: no content", "\n\n" + block(call("nope")) + "\n", Split()),
]
TOOL_IDS = [v[0] for v in TOOL_VECTORS]


@pytest.mark.parametrize(("text", "want"), [v[1:] for v in TOOL_VECTORS], ids=TOOL_IDS)
def test_tool_vectors(text: str, want: Split) -> None:
    assert one_shot(P, text, CTX) == want


@pytest.mark.parametrize(("text", "want"), [v[1:] for v in TOOL_VECTORS], ids=TOOL_IDS)
def test_tool_vectors_over_random_splits(text: str, want: Split) -> None:
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(P, chunks, CTX) == want, chunks


def test_tool_choice_none_takes_the_markup_out_and_keeps_the_rest() -> None:
    text = "\n\nI cannot, but " + block(W) + " after."
    assert one_shot(P, text, NONE) == Split(content="\n\nI cannot, but  after.")


def test_without_tools_every_name_is_read_and_nothing_reported() -> None:
    assert one_shot(P, "Sure.\n" + block(call("anything", a="1")) + " more", NO_TOOLS) == Split(content="Sure.")
    assert one_shot(P, "\n\nPlain.", NO_TOOLS) == Split(content="\n\nPlain.")


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    parser = P(SERIAL)
    got = fold([parser.feed(block(W, call("get_weather", city="Paris"))), parser.finish()])
    assert got == Split(calls=(("get_weather", WJ),))
    assert parser.calls_made == 2


def test_string_values_stream_as_they_come() -> None:
    parser = P(CTX)
    first = parser.feed('<invoke name="write_file"><parameter name="content">Hello, ')
    assert [(d.index, d.name, d.arguments) for d in first.tool_calls] == [(0, "write_file", ""),
                                                                          (0, None, '{"content": "Hello, ')]
    assert parser.feed("wor").tool_calls[0].arguments == "wor"
    assert parser.feed("ld</param").tool_calls[0].arguments == "ld"  # "</param" may be the closing tag
    assert parser.feed("eter></invoke>").tool_calls[0].arguments == '"}'


def test_a_typed_value_is_sent_when_it_closes() -> None:
    parser = P(CTX)
    parser.feed('<invoke name="get_weather"><parameter name="days">1')
    assert parser.feed("2").tool_calls == []
    assert parser.feed("</parameter>").tool_calls[0].arguments == '"days": 12'


# -- reasoning ------------------------------------------------------------------------------------
REASONING_VECTORS: list[tuple[str, str, Split]] = [
    ("reasoning then content", "Easy.\n</think>\n\nThe answer is 4.", Split(content="\n\nThe answer is 4.", reasoning="Easy.")),
    ("trailing whitespace of the reasoning is dropped", "Think.  \n\n</think>\n\nA  ",
     Split(content="\n\nA  ", reasoning="Think.")),
    ("no end: all reasoning, right-stripped", "Still thinking about it \n", Split(reasoning="Still thinking about it")),
    ("every <think> in the reasoning is dropped", "<think>\nA<think>B\n</think>x", Split(content="x", reasoning="\nAB")),
    ("<minimax:tool_call> ends the reasoning and starts the content", "I will call.\n" + block(W),
     Split(content=block(W), reasoning="I will call.")),
    ("every later </think> is dropped, <think> kept", "r</think>a </think>b <think>c</think>",
     Split(content="a b <think>c", reasoning="r")),
    ("a partial marker at the end of the reasoning", "Thinking about <minimax:tool",
     Split(reasoning="Thinking about <minimax:tool")),
    ("a partial </think> at the end of the content", "r</think>end </thi", Split(content="end </thi", reasoning="r")),
    ("empty output", "", Split()),
]
R_IDS = [v[0] for v in REASONING_VECTORS]


@pytest.mark.parametrize(("text", "want"), [v[1:] for v in REASONING_VECTORS], ids=R_IDS)
def test_reasoning_vectors(text: str, want: Split) -> None:
    assert one_shot(R, text, CTX) == want
    for chunks in random_splits(text, seed=len(text)):
        assert streamed(R, chunks, CTX) == want, chunks


def test_reasoning_after_a_prompt_that_closed_the_think_block_is_content() -> None:
    ctx = ParserContext(prompt_ends_reasoning=True)
    assert one_shot(R, "Hi </think> there", ctx) == Split(content="Hi  there")


@pytest.mark.parametrize("text", ["", "Plain.", "r\n</think>\n\nHi.", "<think>x"])
def test_append_think_puts_everything_in_the_content(text: str) -> None:
    for chunks in random_splits(text, seed=3):
        assert streamed(A, chunks, CTX) == Split(content="<think>" + text)
    parser = A(CTX)
    assert not parser.passthrough and parser.reasoning_ended
    parser.feed("x")
    assert parser.passthrough


# -- the recorded vLLM answers, through the parsers -------------------------------------------------
RECORDED = json.loads((Path(__file__).parents[2] / "data" / "vllm" / "parsers" / "minimax_m2.json").read_text("utf-8"))


class _NoReasoning(ReasoningParser):
    name = "none"
    engine_based = True  # (no reasoning parser: vLLM's _engine_based holds)

    def feed(self, text: str) -> ParsedDelta:
        return ParsedDelta(content=text)

    def finish(self) -> ParsedDelta:
        return ParsedDelta()

    def snapshot(self) -> dict[str, Any]:
        return {}

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> _NoReasoning:
        return cls(ctx)

    @property
    def reasoning_ended(self) -> bool:
        return True


def _chain(case: dict[str, Any], chunks: list[str]) -> Split:
    """The reasoning parser, then its content into minimax_m2, with vLLM 0.32's choice of when the tool
    grammar runs (every tool_choice, unless the reasoning parser is not the engine grammar and calls
    are off)."""
    req = case["request"]
    ctx = ParserContext(tools=tuple(req.get("tools") or ()), tool_choice=req.get("tool_choice"),
                        parallel_tool_calls=req.get("parallel_tool_calls") is not False)
    name = case["flags"].get("reasoning_parser")
    rcls: type[ReasoningParser] = REASONING_PARSERS[name] if name else _NoReasoning
    tcls: type[ToolParser] | None = TOOL_PARSERS["minimax_m2"]
    if not rcls.engine_based and (not ctx.tools or ctx.tool_choice == "none"):
        tcls = None
    reasoning, tool = rcls(ctx), None if tcls is None else tcls(ctx)
    deltas: list[ParsedDelta] = []
    for chunk in [*chunks, None]:
        r = reasoning.feed(chunk) if chunk is not None else reasoning.finish()
        deltas.append(ParsedDelta(reasoning=r.reasoning))
        if tool is None:
            deltas.append(ParsedDelta(content=r.content))
            continue
        deltas.append(tool.feed(r.content))
        if chunk is None:
            deltas.append(tool.finish())
        else:
            assert tcls is not None
            tool = tcls.restore(ctx, json.loads(json.dumps(tool.snapshot())))
        if chunk is not None:
            reasoning = rcls.restore(ctx, json.loads(json.dumps(reasoning.snapshot())))
    return fold(deltas)


def _want(case: dict[str, Any]) -> Split:
    answer = case["vllm"]["full"]
    differs = case.get("differs")
    if differs is not None:
        answer = case["vllm"]["stream"] if differs["expect"] == "stream" else differs["expect"]
    calls = tuple((c["name"], c["arguments"]) for c in answer.get("tool_calls") or [])
    return Split(answer.get("content") or "", answer.get("reasoning") or "", calls)


@pytest.mark.parametrize("name", sorted(RECORDED["cases"]))
def test_the_parsers_give_the_recorded_vllm_split(name: str) -> None:
    case = RECORDED["cases"][name]
    text = case["text"].removesuffix("[e~[")
    want = _want(case)
    for chunks in random_splits(text, seed=len(name), count=4):
        assert _chain(case, chunks) == want, chunks


# -- properties -----------------------------------------------------------------------------------
FRAGMENTS = [
    "<minimax:tool_call>", "</minimax:tool_call>", "<minimax:tool", "<invoke name=", '<invoke name="', "<invoke name='",
    "</invoke>", "</inv", "<parameter name=", "</parameter>", "</para", "< parameter name = ", "< / parameter >",
    "<think>", "</think>", "</thi", "get_weather", "search", "nope", "city", "days", "query", "tags", '"', "'", ">",
    '">', "'>", "<", "/", " ", "\n", "\t", "Seattle", "3", "1.5", "true", "null", "[1, 2]", '{"a": 1}', "\\", "é",
    "東京", "😀", "=", "x",
]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
CONTEXTS = [CTX, NONE, NO_TOOLS, SERIAL]


@settings(max_examples=200, deadline=None)
@given(text=texts, data=st.data(), which=st.integers(0, len(CONTEXTS) - 1))
def test_tool_parser_streams_like_one_shot(text: str, data: st.DataObject, which: int) -> None:
    ctx = CONTEXTS[which]
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert streamed(P, split_at(text, cuts), ctx) == one_shot(P, text, ctx)


@settings(max_examples=200, deadline=None)
@given(text=texts, data=st.data())
def test_reasoning_parsers_stream_like_one_shot(text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    for cls in (R, A):
        assert streamed(cls, split_at(text, cuts), CTX) == one_shot(cls, text, CTX)


@settings(max_examples=150, deadline=None)
@given(text=texts, data=st.data())
def test_chained_streams_like_one_shot(text: str, data: st.DataObject) -> None:
    case = {"request": {"tools": list(TOOLS)}, "flags": {"reasoning_parser": "minimax_m2"}}
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert _chain(case, split_at(text, cuts)) == _chain(case, [text])


# -- the derenderer's argument shortcut (plain_args_call) -----------------------------------------
@pytest.mark.parametrize("ctx", CONTEXTS, ids=["auto", "none", "no_tools", "serial"])
def test_the_args_shortcut_inside_a_string_value_splits_as_feeding(ctx: ParserContext) -> None:
    head = ["<minimax:tool_call>\n", '<invoke name="write_file">\n', '<parameter name="content">', "Once"]
    string = [" upon", " a < b", " time", ' "q"', "\n", " 東京 😀", "\\", " </para", "meter>\n", "</invoke>\n"]
    second = ['<invoke name="search">', '<parameter name="query">', "rain", " in", " Paris", "</parameter>",
              "</invoke>", "</minimax:tool_call>"]
    parser = P(ctx)
    for chunk in head:
        parser.feed(chunk)
    reported = ctx in (CTX, SERIAL)  # tool_choice "none" and no tools: calls are read, not reported
    assert parser.plain_args_call() == (0 if reported else None)
    assert parser.plain_args_guard() == "<"
    for chunk in string + second[:3]:
        parser.feed(chunk)
    assert parser.plain_args_call() == (1 if ctx is CTX else None)  # serial: the second call is not reported
    chunks = head + string + second
    want = one_shot(P, "".join(chunks), ctx)
    assert len(want.calls) == {id(CTX): 2, id(SERIAL): 1}.get(id(ctx), 0)
    assert skipping(P(ctx), chunks) == want


# heads that leave the parser in a string value, inside its closing tag (a partial terminal, or a
# lenient one the value reader holds), in a typed value, in a name
SHORTCUT_HEADS = ["", '<minimax:tool_call>\n<invoke name="write_file">\n<parameter name="content">Hel',
                  '<invoke name="write_file"><parameter name="content">a </para',
                  '<invoke name="write_file"><parameter name="content">a < / ',
                  '<invoke name="get_weather"><parameter name="days">1', '<invoke name="get_wea']


@settings(max_examples=300, deadline=None)
@given(head=st.sampled_from(SHORTCUT_HEADS), text=st.lists(st.sampled_from([*FRAGMENTS, "plain words", "a"]),
                                                           max_size=30).map("".join), data=st.data())
def test_skipping_what_the_args_shortcut_covers_splits_as_feeding(head: str, text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    chunks = [head, *split_at(text, cuts)]
    for ctx in CONTEXTS:
        assert skipping(P(ctx), chunks) == one_shot(P, head + text, ctx)


def test_past_the_reasoning_a_text_without_lt_is_content_as_it_is() -> None:
    """The reasoning parser's content shortcut (plain_content_guard), which lets the derenderer
    reach the tool parser's argument shortcut behind it."""
    parser = R(CTX)
    assert parser.plain_content_guard() is None  # reasoning: its trailing whitespace is held
    parser.feed("Easy.</think>")
    assert parser.plain_content_guard() == "<" and not parser.passthrough
    parser.feed("a </thi")
    assert parser.plain_content_guard() is None  # a partial </think> is held
    parser.feed("nk>b")
    assert parser.plain_content_guard() == "<"


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(texts, max_size=6), plain=st.sampled_from(["plain words", " 東京 😀", ' say "hi"\n', "\n\n"]))
def test_a_text_the_content_shortcut_covers_feeds_as_content_and_changes_nothing(chunks: list[str],
                                                                                 plain: str) -> None:
    parser = R(CTX)
    offered = 0
    for chunk in [*chunks, ""]:
        parser.feed(chunk)
        guard = parser.plain_content_guard()
        if guard is None:
            continue
        assert guard == "<"
        offered += 1
        twin = R.restore(CTX, json.loads(json.dumps(parser.snapshot())))
        before = twin.snapshot()
        got = twin.feed(plain)
        assert (got.content, got.reasoning) == (plain, "")
        assert twin.snapshot() == before
    if "</think>" in "".join(chunks) and not parser.snapshot()["b"]:
        assert offered


# -- conversions ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "schema", "want"), [
    ("42", {"type": "integer"}, 42), (" 42 ", {"type": "integer"}, 42), ("4_2", {"type": "int"}, 42),
    ("3.0", {"type": "number"}, 3), ("0.5", {"type": "number"}, 0.5), ("nan", {"type": "number"}, "nan"),
    ("inf", {"type": "integer"}, "inf"), ("1", {"type": "boolean"}, True), ("False", {"type": "bool"}, False),
    ("NULL", {"anyOf": [{"type": "string"}, {"type": "null"}]}, None), ("x", {"type": ["null", "string"]}, "x"),
    ("[1]", {"type": "object"}, [1]), ('{"a": NaN}', {"type": "object"}, '{"a": NaN}'), ('"q"', {"type": "foo"}, "q"),
    ("1", {"enum": ["a", 1]}, 1), ("5", {"type": "str"}, "5"), ("5", {}, "5"), ("yes", {"type": "boolean"}, "yes"),
])
def test_coerce_as_vllm(value: str, schema: dict[str, Any], want: Any) -> None:
    got = coerce(value, types_of(schema))
    assert got == want and type(got) is type(want)


# -- state ----------------------------------------------------------------------------------------
def _max_snapshot(cls: type[ToolParser] | type[ReasoningParser], chunks: list[str], ctx: ParserContext) -> int:
    parser: Any = cls(ctx)
    biggest = 0
    for chunk in chunks:
        parser.feed(chunk)
        biggest = max(biggest, len(json.dumps(parser.snapshot())))
        parser = cls.restore(ctx, json.loads(json.dumps(parser.snapshot())))
    return biggest


def test_snapshot_stays_small_inside_a_long_argument() -> None:
    body = "".join(f"line {i} <b>x</b> \"q\" \\ {'é' * (i % 5)}\n" for i in range(800))
    text = '\n\nWriting.\n<minimax:tool_call>\n<invoke name="write_file">\n<parameter name="content">' + body
    chunks = [text[i : i + 7] for i in range(0, len(text), 7)] + ["</parameter>\n</invoke>"]
    assert len(body) > 20_000
    assert _max_snapshot(P, chunks, CTX) < 1024


def test_snapshot_stays_small_inside_long_reasoning_and_whitespace() -> None:
    text = "".join(f"step {i}: think <b> hard.{' ' * (i % 3)}\n" for i in range(1000)) + " " * 5000 + "\n" * 5000
    chunks = [text[i : i + 11] for i in range(0, len(text), 11)]
    assert _max_snapshot(R, chunks, CTX) < 1024
    content = "Hello" + " " * 20_000
    assert _max_snapshot(P, [content[i : i + 13] for i in range(0, len(content), 13)], CTX) < 1024


@pytest.mark.parametrize("bad", [None, {}, {"p": "hermes"}, {"p": "minimax_m2", "m": "content"},
                                 {"p": "minimax_m2", "m": "weird", "b": "", "n": 0, "w": "", "f": [0, 0, 0]},
                                 {"p": "minimax_m2", "m": "args", "b": "", "n": 0, "w": "", "f": [0, 0, 0]}])
def test_tool_restore_refuses_a_bad_snapshot(bad: Any) -> None:
    with pytest.raises(MalformedSnapshot):
        P.restore(CTX, bad)


@pytest.mark.parametrize("bad", [None, {"p": "qwen3"}, {"p": "minimax_m2", "m": "x", "b": "", "w": ""},
                                 {"p": "minimax_m2", "m": "content"}])
def test_reasoning_restore_refuses_a_bad_snapshot(bad: Any) -> None:
    with pytest.raises(MalformedSnapshot):
        R.restore(CTX, bad)
    with pytest.raises(MalformedSnapshot):
        A.restore(CTX, {"p": "minimax_m2_append_think"})


def test_vllms_parser_attributes() -> None:
    assert P.engine_based and not P.supports_required_and_named and not P.needs_special_tokens
    assert R.engine_based and not A.engine_based


def test_registered_under_vllms_names() -> None:
    assert TOOL_PARSERS["minimax_m2"] is P
    assert REASONING_PARSERS["minimax_m2"] is R
    assert REASONING_PARSERS["minimax_m2_append_think"] is A
