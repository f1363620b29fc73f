"""The harmony (gpt-oss) parser: vLLM 0.32's own split of 417 outputs (recorded by
``scripts/record_harmony_oracle.py`` from vLLM's HarmonyParser, in four parser configurations), any
split with snapshot → JSON → restore equal to one-shot, and a small snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session.parsers import REASONING_PARSERS, TOOL_PARSERS, MalformedSnapshot, ParserContext
from session.parsers.base import ParsedDelta, ReasoningParser, ToolCallDelta
from session.parsers.harmony import (
    HEADER_MAX,
    HarmonyReasoningParser,
    HarmonyToolParser,
    harmony_for,
    harmony_parser,
    is_harmony_model,
    parse_header,
)
from session.parsers.tool.json_stream import ascii_body, is_plain_without
from tests.session.parsers.parsers_harness import Split, fold, one_shot, random_splits, split_at, streamed

ORACLE = json.loads((Path(__file__).parents[2] / "data" / "vllm" / "harmony_oracle.json").read_text(encoding="utf-8"))
CONFIGS = {"none": (False, False), "r": (True, False), "t": (False, True), "rt": (True, True)}
CTX = ParserContext()


def _split(answer: dict[str, Any]) -> Split:
    return Split(answer["content"] or "", answer["reasoning"] or "", tuple((n, a) for n, a in answer["calls"]))


def _valid_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _overflows(cls: Any, text: str) -> bool:
    parser = cls(CTX)
    seen = False
    for c in text:
        parser.feed(c)
        seen = seen or parser.machine.mode == "X"
    return seen


def test_registered_under_vllm_names() -> None:
    assert TOOL_PARSERS["openai"] is HarmonyToolParser
    assert REASONING_PARSERS["openai_gptoss"] is HarmonyReasoningParser
    assert harmony_for(HarmonyToolParser, HarmonyReasoningParser, True) is harmony_parser(True, True)
    assert harmony_for(HarmonyToolParser, HarmonyReasoningParser, False) is HarmonyReasoningParser
    assert harmony_for(None, None, True) is None
    assert is_harmony_model({"model_type": "gpt_oss"}) and not is_harmony_model({"model_type": "qwen3"})


@pytest.mark.parametrize("key", list(CONFIGS))
def test_vllm_oracle(key: str) -> None:
    """One-shot equals vLLM's non-streaming split for every recorded output, except where we
    deliberately differ: arguments that are not valid JSON once started (we keep the canonical
    text streamed so far; vLLM returns the raw text) and headers longer than HEADER_MAX."""
    cls = harmony_parser(*CONFIGS[key])
    equal = differ = 0
    for case in ORACLE["cases"]:
        want = _split(case[key])
        got = one_shot(cls, case["text"], CTX)
        if got == want:
            equal += 1
            continue
        if _overflows(cls, case["text"]):
            differ += 1
            continue
        assert (got.content, got.reasoning) == (want.content, want.reasoning), case["text"]
        assert [n for n, _ in got.calls] == [n for n, _ in want.calls], case["text"]
        for (_, g), (_, w) in zip(got.calls, want.calls, strict=True):
            assert g == w or not _valid_json(w), case["text"]
        differ += 1
    assert equal >= 0.9 * len(ORACLE["cases"]), (equal, differ)


@pytest.mark.parametrize("key", ["r", "t", "rt"])
def test_random_splits_equal_one_shot(key: str) -> None:
    cls = harmony_parser(*CONFIGS[key])
    for n, case in enumerate(ORACLE["cases"][:150]):
        text = case["text"]
        whole = one_shot(cls, text, CTX)
        for chunks in random_splits(text, seed=n, count=4):
            assert streamed(cls, chunks, CTX) == whole, (text, chunks)
        assert streamed(cls, list(text), CTX) == whole, text


VECTORS = [
    ("analysis then final", "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>final"
     "<|message|>Hello!", Split("Hello!", "Let me think.")),
    ("a call", '<|channel|>analysis<|message|>T<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather'
     ' <|constrain|>json<|message|>{"city":"Paris","u":"é🤖"}', Split("", "T", (("get_weather",
                                                                             '{"city": "Paris", "u": "\\u00e9\\ud83e\\udd16"}'),))),
    ("preamble then a call", "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary"
     " to=functions.f<|message|>{}", Split("Checking.", "", (("f", "{}"),))),
    ("built-in tool dropped", '<|channel|>commentary to=browser.search<|message|>{"q":"x"}', Split()),
    ("two analysis joined", "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>analysis<|message|>B",
     Split("", "A\nB")),
    ("length inside analysis", "<|channel|>analysis<|message|>Think more", Split("", "Think more")),
    ("raw args", "<|channel|>commentary to=functions.f <|constrain|>xml<|message|><a/>",
     Split("", "", (("f", "<a/>"),))),
    ("not json", "<|channel|>commentary to=functions.f<|message|>not json", Split("", "", (("f", "not json"),))),
    ("no structure", "Hello plain text", Split("Hello plain text")),
    ("ends in a header", "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final",
     Split("<|start|>assistant<|channel|>final", "x")),
    ("prompt's start repeated", "<|start|>assistant<|channel|>final<|message|>Hi", Split("Hi")),
    ("other role dropped", "<|channel|>final<|message|>a<|end|><|start|>user<|channel|>final<|message|>b", Split("a")),
    ("two calls", '<|channel|>commentary to=functions.a <|constrain|>json<|message|>{"x": 1}<|call|><|start|>assistant'
     '<|channel|>commentary to=functions.b <|constrain|>json<|message|>[1,2]', Split("", "", (("a", '{"x": 1}'),
                                                                                              ("b", "[1, 2]")))),
]


@pytest.mark.parametrize(("label", "text", "expected"), VECTORS, ids=[v[0] for v in VECTORS])
def test_vectors(label: str, text: str, expected: Split) -> None:
    cls = harmony_parser(True, True)
    assert one_shot(cls, text, CTX) == expected
    assert streamed(cls, list(text), CTX) == expected


def test_parse_header() -> None:
    assert parse_header("<|channel|>commentary to=functions.f <|constrain|>json", True) == (
        "assistant", "commentary", "functions.f", "<|constrain|>json")
    assert parse_header("assistant to=functions.f<|channel|>commentary json", False) == (
        "assistant", "commentary", "functions.f", "json")
    assert parse_header("<|channel|>final", False) is None  # no role after the first message
    assert parse_header("a b c", True) is None
    assert parse_header("<|channel|>", True) is None


FRAGMENTS = ["<|start|>", "assistant", "<|channel|>", "analysis", "final", "commentary", " to=functions.f",
             " to=python", " <|constrain|>json", " json", "<|message|>", "<|end|>", "<|call|>", "<|return|>",
             '{"a": ', '"é🤖 \\u00e9"', "1.50", "[1, ", "]", "}", " ", "\n", "text", "<", "|", "<|"]


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=30), data=st.data())
def test_any_split_equals_one_shot(parts: list[str], data: st.DataObject) -> None:
    text = "".join(parts)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    cls = harmony_parser(True, True)
    assert streamed(cls, split_at(text, cuts), CTX) == one_shot(cls, text, CTX)


def test_snapshot_small_on_long_output() -> None:
    cls = harmony_parser(True, True)
    texts = ["<|channel|>analysis<|message|>" + "think " * 4000,
             '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": "' + "x" * 20000,
             "<|channel|>commentary to=functions.f <|constrain|>xml<|message|>" + "<a>" * 7000,
             "garbage without structure " * 1000]
    for text in texts:
        parser = cls(CTX)
        for k in range(0, len(text), 97):
            parser.feed(text[k:k + 97])
            assert len(json.dumps(parser.snapshot())) < 1024
    assert HEADER_MAX < 1024


def test_restore_rejects_other_states() -> None:
    cls = harmony_parser(True, True)
    with pytest.raises(MalformedSnapshot):
        cls.restore(CTX, {"p": "hermes"})
    with pytest.raises(MalformedSnapshot):
        cls.restore(CTX, {"p": cls.name, "m": "Q"})
    with pytest.raises(MalformedSnapshot):
        HarmonyToolParser.restore(CTX, {"p": "openai", "m": "H", "b": "x" * 2000})


# -- the derenderer's shortcuts: plain reasoning, content and arguments --------------------------


def skipping(cls: Any, chunks: list[str], ctx: ParserContext = CTX, skipped: list[str] | None = None) -> Split:
    """Feed ``chunks`` as the derenderer steps: a chunk one of the parser's shortcuts covers is not
    fed but taken as what the shortcut promises (and appended to ``skipped``)."""
    parser = cls(ctx)
    deltas = []
    for chunk in chunks:
        guard = parser.plain_reasoning_guard() if isinstance(parser, ReasoningParser) else None
        content, call = parser.plain_content_guard(), parser.plain_args_call()
        promise = None
        if chunk and guard is not None and guard not in chunk:
            promise = ParsedDelta(reasoning=chunk)
        elif chunk and content is not None and content not in chunk:
            promise = ParsedDelta(content=chunk)
        elif chunk and call is not None and is_plain_without(chunk, parser.plain_args_guard()):
            args = ascii_body(chunk) if parser.plain_args_ascii() else chunk
            promise = ParsedDelta(tool_calls=[ToolCallDelta(call, None, args)])
        if promise is None:
            deltas.append(parser.feed(chunk))
        else:
            deltas.append(promise)
            if skipped is not None:
                skipped.append(chunk)
    deltas.append(parser.finish())
    return fold(deltas)


CALL_HEAD = "<|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>"


@pytest.mark.parametrize("cls", [harmony_parser(True, True), HarmonyToolParser], ids=["reasoning_slot", "tool_slot"])
@pytest.mark.parametrize("parallel", [True, False])
def test_the_shortcuts_split_as_feeding(cls: Any, parallel: bool) -> None:
    ctx = ParserContext(parallel_tool_calls=parallel)
    chunks = ["<|channel|>analysis<|message|>", "Let", " me", " think", " <", "|end|>",
              "<|start|>assistant<|channel|>final<|message|>", "Here", " it", " is", "<|end|>",
              CALL_HEAD, '{"path"', ': "', "plan", ".md", '", "content": "', "Mon", "day", " 東京", " rain", "\\n",
              " walk", " a<b", " c", '"', "}", "<|call|>",
              CALL_HEAD, '{"a": "', "x", " y", "<|ca", "ll|>",
              "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>xml<|message|>", "<a>", "raw",
              " text", "</a>", "<|call|>"]
    skipped: list[str] = []
    assert skipping(cls, chunks, ctx, skipped) == one_shot(cls, "".join(chunks), ctx)
    # a JSON string's text (non-ASCII escaped), raw arguments; (parallel_tool_calls false: the first call's only)
    args = ["plan", ".md", "Mon", "day", " 東京", " rain", " walk", " c",
            *(("x", " y", "raw", " text") if parallel else ())]
    if cls is HarmonyToolParser:  # (content only: the tool slot drops analysis)
        assert skipped == [" it", " is", *args]
    else:
        assert skipped == [" me", " think", " it", " is", *args]
    parser = cls(ctx)
    parser.feed("".join(chunks[:chunks.index("Mon") + 1]))
    assert parser.plain_args_call() == 0
    assert parser.plain_args_guard() == "<" and parser.plain_args_ascii()


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from([*FRAGMENTS, CALL_HEAD + '{"a": "', "x", " y", "東京"]), max_size=30),
       plain=st.sampled_from(["plain words", "東京", "x", "a<b", '"', "é"]), data=st.data())
def test_where_a_shortcut_is_offered_feeding_returns_the_promise_and_changes_nothing(
        parts: list[str], plain: str, data: st.DataObject) -> None:
    cls: Any = data.draw(st.sampled_from([harmony_parser(True, True), HarmonyToolParser]))
    ctx = ParserContext(parallel_tool_calls=data.draw(st.booleans()))
    text = "".join(parts)
    parser = cls(ctx)
    for chunk in split_at(text, data.draw(st.lists(st.integers(0, len(text)), max_size=10))):
        parser.feed(chunk)
        promises: list[tuple[str, str, list[tuple[int, Any, str]]]] = []
        if isinstance(parser, ReasoningParser) and parser.plain_reasoning_guard() not in (None, *plain):
            promises.append(("", plain, []))
        if parser.plain_content_guard() not in (None, *plain):
            promises.append((plain, "", []))
        call = parser.plain_args_call()
        if call is not None and is_plain_without(plain, parser.plain_args_guard()):
            promises.append(("", "", [(call, None, ascii_body(plain) if parser.plain_args_ascii() else plain)]))
        for promise in promises:
            twin = cls.restore(ctx, json.loads(json.dumps(parser.snapshot())))
            before = twin.snapshot()
            got = twin.feed(plain)
            assert (got.content, got.reasoning, [(c.index, c.name, c.arguments) for c in got.tool_calls]) == promise
            assert twin.snapshot() == before
    chunks = split_at(text + plain * 3, data.draw(st.lists(st.integers(0, len(text) + 3 * len(plain)), max_size=20)))
    assert skipping(cls, chunks, ctx) == one_shot(cls, text + plain * 3, ctx)
