"""Parser registry and per-request selection: names, errors, tool_choice, parallel_tool_calls,
snapshots that do not belong to the parser."""

from __future__ import annotations

import json

import pytest

from session.parsers import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    MalformedSnapshot,
    UnknownParser,
    build_tool_parser,
    effective_tool_choice,
    get_reasoning_parser,
    get_tool_parser,
    restore_tool_parser,
    tool_parser_class,
)
from session.parsers.base import ParserContext, ReasoningParser, ToolParser
from session.parsers.tool import (
    HermesToolParser,
    Llama3JsonToolParser,
    NamedToolChoiceParser,
    RequiredToolChoiceParser,
)

from .parsers_harness import TOOLS, fold

CALLS = (
    '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
    '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
)


def test_the_issue_parsers_are_registered_under_vllm_names() -> None:
    assert {"hermes", "llama3_json", "mistral", "pythonic", "deepseek_v3"} <= set(TOOL_PARSERS)
    assert {"deepseek_r1", "qwen3"} <= set(REASONING_PARSERS)
    for name, cls in TOOL_PARSERS.items():
        assert issubclass(cls, ToolParser), name
        assert get_tool_parser(name) is cls
    for name, rcls in REASONING_PARSERS.items():
        assert issubclass(rcls, ReasoningParser), name
        assert get_reasoning_parser(name) is rcls
    # a class registered under several names (vLLM's aliases) carries one of them as its own
    for registry in (TOOL_PARSERS, REASONING_PARSERS):
        for name, pcls in registry.items():
            assert pcls.name in registry and registry[pcls.name] is pcls, name


def test_vllm_alias_names_reach_the_same_parsers() -> None:
    assert get_tool_parser("llama4_json") is Llama3JsonToolParser
    assert get_tool_parser("deepseek_v31") is get_tool_parser("deepseek_v3")


def test_an_unknown_tool_parser_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownParser, match=r"unknown tool call parser 'hermes2'; valid names: .*hermes.*pythonic"):
        get_tool_parser("hermes2")


def test_an_unknown_reasoning_parser_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid names: deepseek_r1, .*, qwen3"):
        get_reasoning_parser("r1")


@pytest.mark.parametrize(
    ("tools", "tool_choice", "expected"),
    [
        ((), None, "none"),
        (TOOLS, None, "auto"),
        (TOOLS, "none", "none"),
        (TOOLS, "required", "required"),
    ],
)
def test_an_absent_tool_choice_means_auto_with_tools_and_none_without(tools, tool_choice, expected) -> None:  # type: ignore[no-untyped-def]
    assert effective_tool_choice(ParserContext(tools=tools, tool_choice=tool_choice)) == expected


def test_tool_choice_selects_the_parser() -> None:
    named = {"type": "function", "function": {"name": "a"}}
    assert tool_parser_class("hermes", ParserContext(tools=TOOLS)) is HermesToolParser
    assert tool_parser_class("hermes", ParserContext(tools=TOOLS, tool_choice="auto")) is HermesToolParser
    assert tool_parser_class(None, ParserContext(tools=TOOLS, tool_choice="auto")) is None
    assert tool_parser_class("hermes", ParserContext(tools=TOOLS, tool_choice="none")) is None
    assert tool_parser_class("hermes", ParserContext()) is None  # no tools: no tool parsing
    assert tool_parser_class("hermes", ParserContext(tools=TOOLS, tool_choice=named)) is NamedToolChoiceParser
    assert tool_parser_class(None, ParserContext(tools=TOOLS, tool_choice="required")) is RequiredToolChoiceParser


def test_parallel_tool_calls_false_keeps_only_the_first_call() -> None:
    ctx = ParserContext(tools=TOOLS, parallel_tool_calls=False)
    parser = build_tool_parser("hermes", ctx)
    assert parser is not None
    split = fold([parser.feed(CALLS), parser.finish()])
    assert split.calls == (("a", '{"x": 1}'),)
    assert parser.calls_made == 2  # the derenderer still sees that calls were made


def test_parallel_tool_calls_default_keeps_all_calls() -> None:
    parser = build_tool_parser("hermes", ParserContext(tools=TOOLS))
    assert parser is not None
    assert len(fold([parser.feed(CALLS), parser.finish()]).calls) == 2


def test_restore_tool_parser_rebuilds_what_build_made() -> None:
    ctx = ParserContext(tools=TOOLS)
    parser = build_tool_parser("hermes", ctx)
    assert parser is not None
    first = parser.feed(CALLS[:40])
    again = restore_tool_parser("hermes", ctx, json.loads(json.dumps(parser.snapshot())))
    rest = again.feed(CALLS[40:])
    assert fold([first, rest, again.finish()]).calls == (("a", '{"x": 1}'), ("b", "{}"))


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
def test_a_tool_parser_refuses_another_parsers_snapshot(name: str) -> None:
    cls = get_tool_parser(name)
    other = RequiredToolChoiceParser(ParserContext(tool_choice="required")).snapshot()
    with pytest.raises(MalformedSnapshot):
        cls.restore(ParserContext(tools=TOOLS), other)


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
def test_a_tool_parser_refuses_a_snapshot_with_missing_fields(name: str) -> None:
    cls = get_tool_parser(name)
    snapshot = cls(ParserContext(tools=TOOLS)).snapshot()
    del snapshot["m"]
    with pytest.raises(MalformedSnapshot):
        cls.restore(ParserContext(tools=TOOLS), snapshot)


@pytest.mark.parametrize("name", sorted(REASONING_PARSERS))
def test_a_reasoning_parser_refuses_a_bad_snapshot(name: str) -> None:
    cls = get_reasoning_parser(name)
    with pytest.raises(MalformedSnapshot):
        cls.restore(ParserContext(), {"p": name, "m": "sideways", "b": "", "s": False, "t": False})
    with pytest.raises(MalformedSnapshot):
        cls.restore(ParserContext(), {"p": "hermes"})


def test_restore_refuses_a_tool_snapshot_when_the_request_parses_no_tools() -> None:
    with pytest.raises(MalformedSnapshot, match="parses no tool calls"):
        restore_tool_parser("hermes", ParserContext(), {"p": "hermes"})


def test_special_token_needs_per_parser() -> None:
    needs = {name: TOOL_PARSERS[name].needs_special_tokens for name in (
        "hermes", "llama3_json", "llama4_json", "mistral", "pythonic", "deepseek_v3", "deepseek_v31")}
    assert needs == {"hermes": False, "llama3_json": False, "llama4_json": False, "mistral": True,
                     "pythonic": False, "deepseek_v3": True, "deepseek_v31": True}
    assert not any(REASONING_PARSERS[name].needs_special_tokens for name in ("deepseek_r1", "qwen3"))
